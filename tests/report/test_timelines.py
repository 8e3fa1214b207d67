"""The report's view of the readouts over training: table, per-run figure, overlay."""

from __future__ import annotations

import pandas as pd

from mecheval.interventions.timeline import timeline
from mecheval.report.figures import to_png
from mecheval.report.timelines import formation_steps, overlay_figure, read_layer_rows, run_figure, timeline_table
from tests.interventions.conftest import small_ar
from tests.interventions.test_timeline import SWITCH, fake_run


def test_table_and_figures_of_a_run_whose_mechanism_formed_at_a_known_step(tmp_path):
    run = fake_run(tmp_path / "run", small_ar())
    table = timeline(run, n=32)
    best = pd.DataFrame([{"run_dir": str(run), "arch": "attention", "seed": 0},
                         {"run_dir": str(tmp_path / "none"), "arch": "mamba", "seed": 0}])  # no timeline: left out
    timelines = formation_steps(best)
    assert list(timelines) == [str(run)] and timelines[str(run)][1] == SWITCH
    rows = timeline_table(best, timelines).to_dict("records")
    assert rows == [{"arch": "attention", "seed": 0, "final mechanism": "induction", "formed at step": SWITCH,
                     "accuracy then": "1.00", "final accuracy": "1.00", "snapshots": 5, "n": 32}]
    shown = read_layer_rows(table)
    assert set(shown["boundary"]) == {1}  # the final verdict's read point
    assert shown[shown["step"] < SWITCH]["attrib"].isna().all()  # not learned yet: blank, not noise
    for fig in (run_figure(table, "attention"), overlay_figure(best, timelines, {"attention": "#0072B2"})):
        assert len(to_png(fig)) > 5000


def test_a_timeline_whose_final_step_has_no_verdict_says_not_read(tmp_path):
    run = fake_run(tmp_path / "run", small_ar())
    table = timeline(run, n=32)
    table["verdict"] = None  # e.g. a 1-layer model: no block input after layer 0 to read
    best = pd.DataFrame([{"run_dir": str(run), "arch": "attention (1 layer)", "seed": 0}])
    rows = timeline_table(best, {str(run): (table, None)}).to_dict("records")
    assert rows[0]["final mechanism"] == "not read" and rows[0]["formed at step"] == "–"


def test_steps_at_chance_read_not_learned_by_the_current_rules():
    """A timeline of earlier rules labelled steps at chance (accuracy 0.07 on 256 examples, chance 1/16): read with
    the chance test they are `not learned`, so the mechanism forms where the accuracy leaves chance; an unknown
    chance changes nothing."""
    from mecheval.interventions.timeline import formed_at
    from mecheval.report.timelines import chance_gated

    acc = {0: 0.05, 1000: 0.07, 2000: 0.15, 3000: 0.30}
    table = pd.DataFrame([{"step": s, "boundary": 1, "role": "key", "verdict": "direct retrieval", "acc": a, "n": 256}
                          for s, a in acc.items()])
    assert formed_at(table) == 0
    gated = chance_gated(table, 1 / 16)
    assert gated["verdict"].tolist() == ["not learned", "not learned", "direct retrieval", "direct retrieval"]
    assert formed_at(gated) == 2000 and table["verdict"].eq("direct retrieval").all()  # the file's table untouched
    assert chance_gated(table, float("nan")).equals(table)
