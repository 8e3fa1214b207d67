"""The report's summary over seeds and grammars: one row per (architecture, width[, grammar])."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from rich.console import Console

from mecheval.report.analyse import seeds_table, summarise
from mecheval.report.build import GRAMMAR, Report, accuracy_bars, seeds_for_people
from mecheval.report.decide import multi_bootstrap
from mecheval.report.figures import accuracy_figure
from mecheval.report.terminal import print_summary


def study_rows(grammars=("easy",)) -> pd.DataFrame:
    rows = []
    for grammar in grammars:
        for arch, accs, verdicts in [("attention", [1.0, 0.8, 0.9], ["induction", "induction", "mixed"]),
                                     ("mamba", [0.5, 0.7, 0.6], ["direct retrieval"] * 3)]:
            for seed, (acc, verdict) in enumerate(zip(accs, verdicts)):
                rows.append({"name": f"{arch}-{grammar}-{seed}", "status": "done", "arch": arch, "arch_name": arch,
                             "arch_conv": None, "model.d_model": 64,
                             "optim.lr": 3e-3, "seed": seed, "acc": acc, "eval.size": 1024, "verdict": verdict, "best_lr": True,
                             "attrib@key": 0.0, "attrib@value": acc, "attrib@query": 0.0, "effect": 0.5,
                             "task.name": "atr", GRAMMAR: grammar})
    return pd.DataFrame(rows)


def test_seeds_are_averaged_into_one_row_with_the_most_common_verdict():
    summary = summarise(study_rows())
    assert summary["arch"].tolist() == ["attention", "mamba"]
    assert summary["seeds"].tolist() == [3, 3]
    np.testing.assert_allclose(summary["acc"], [0.9, 0.6])
    assert summary["verdict"].tolist() == ["induction", "direct retrieval"]
    assert summary["verdicts"].tolist() == ["induction 2, mixed 1", "direct retrieval 3"]  # no seed hidden
    assert GRAMMAR not in summary  # one grammar: no column for it
    seeds = seeds_table(study_rows())
    np.testing.assert_allclose(seeds["acc_std"], [0.1, 0.1])
    assert seeds["acc_min"].tolist() == [0.8, 0.5] and seeds["acc_max"].tolist() == [1.0, 0.7]
    np.testing.assert_allclose(seeds["value_mean"], [0.9, 0.6])  # every seed learned here
    rows = study_rows()
    rows.loc[rows["arch"] == "mamba", "verdict"] = "not learned"
    assert seeds_table(rows)["value_mean"].isna().tolist() == [False, True]
    people = seeds_for_people(seeds_table(study_rows()))  # what the report shows
    assert list(people.columns[:4]) == ["architecture", "width", "learning rate", "seeds"] and "sd" in people


def test_several_grammars_keep_a_row_each_and_draw():
    summary = summarise(study_rows(("easy", "medium")))
    assert list(zip(summary["arch"], summary[GRAMMAR])) == [
        ("attention", "easy"), ("mamba", "easy"), ("attention", "medium"), ("mamba", "medium")]
    published = summary.set_index(["arch", GRAMMAR])["published_acc"]
    assert published[("mamba", "easy")] != published[("mamba", "medium")]  # looked up per grammar


@pytest.mark.parametrize("grammars", [("easy",), ("easy", "medium")])
def test_one_bar_per_summary_row(grammars):
    summary = summarise(study_rows(grammars))
    fig = accuracy_figure(accuracy_bars(summary))
    assert len(fig.axes[0].patches) == len(summary)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == (["attention", "mamba"] if len(grammars) == 1 else
                      ["attention · easy", "mamba · easy", "attention · medium", "mamba · medium"])
    plt.close(fig)


@pytest.mark.parametrize("grammars", [("easy",), ("easy", "medium")])
def test_terminal_shows_seeds_and_grammar_columns_where_the_study_has_them(grammars, tmp_path):
    summary = summarise(study_rows(grammars))
    console = Console(record=True, width=250)
    print_summary(Report(tmp_path / "report.md", tmp_path / "report.html", summary), console)
    header = next(line for line in console.export_text().splitlines() if "┃ arch" in line)
    assert "seeds" in header and ("grammar" in header) == (len(grammars) > 1)
    assert "heldout" not in header


def test_published_accuracy_reads_the_width_grammar_and_conv():
    from mecheval.report import published
    from mecheval.report.compare import published_accuracy

    assert published_accuracy("atr", "easy", "mamba", None, 64) == 308 / 320  # the study's 96.25%, exact
    assert published_accuracy("atr", None, "attention", None, 64) == 300 / 320  # the easy grammar by default
    assert published_accuracy("atr", "medium", "h3", None, 64) is None  # not reported
    assert published_accuracy("ar", None, "mamba", 3, 64) == 0.91
    assert published_accuracy("ar", None, "based", "long", 64) == published.BASED_AR_BY_CONV["long"][64]
    assert published_accuracy("ar", None, "hyena", None, 256) == 95 / 320  # 29.69%
    assert published_accuracy("ar", None, "mamba2", None, 64) is None  # a plug-in: nothing published


def test_intervals_over_seeds_and_for_one_run():
    rows = study_rows().assign(acc_outside=lambda d: d["acc"], acc_outside_lo=0.0, acc_outside_hi=1.0,
                               **{"attrib@value_lo": 0.1, "attrib@value_hi": 0.2})
    summary = summarise(rows).set_index("arch")
    # three seeds: the multi-bootstrap over seeds and their examples (the runs' own intervals where no count is
    # known; accuracy clipped to [0, 1]), not a t interval over the three ([0.65, 1.15])
    lo, hi = summary.loc["attention", ["acc_outside_lo", "acc_outside_hi"]]
    assert (lo, hi) == pytest.approx((max(multi_bootstrap([1.0, 0.8, 0.9], [0.0] * 3, [1.0] * 3)[0], 0), 1.0))
    counted = summarise(rows.assign(n_outside=500)).set_index("arch")  # with counts: each seed's examples resampled
    lo, hi = counted.loc["attention", ["acc_outside_lo", "acc_outside_hi"]]
    assert 0.8 < lo < 0.86 and 0.94 < hi <= 1.0
    one = summarise(rows[rows["seed"] == 0]).set_index("arch")  # one run: its own interval
    assert tuple(one.loc["mamba", ["attrib@value_lo", "attrib@value_hi"]]) == (0.1, 0.2)


def test_held_out_readouts_are_averaged_and_compared_with_the_published_by_intervals():
    """A generalisation study: held-out accuracy (multi-bootstrap over seeds) against the study's .60 (attention,
    d = 64) and .47 (Mamba), and held-out @value beside its 1.22 / ≈ 0."""
    from mecheval.report.build import for_people

    rows = study_rows().assign(acc_heldout=0.5)
    rows["heldout.acc_all"] = [0.58, 0.60, 0.62, 0.20, 0.22, 0.24]
    rows["heldout.attrib@value"] = [1.3, 1.4, 1.5, 0.0, 0.01, 0.02]
    summary = summarise(rows)
    np.testing.assert_allclose(summary["heldout.acc_all"], [0.60, 0.22])
    assert summary["published_heldout_acc"].tolist() == [192 / 320, 149 / 320]  # 60.00%, 46.56%
    # .60 inside ours, but its own interval on 320 examples is wider than the margin; .47 far above [0.20, 0.24]
    assert summary["heldout_agree"].tolist() == ["inconclusive", "differ"]
    np.testing.assert_allclose(summary["heldout.attrib@value"], [1.4, 0.01])
    people = for_people(summary).set_index("architecture")
    assert people.at["mamba", "held-out acc (published, compared)"] == "0.22 [0.20, 0.24] (0.47 [0.41, 0.52], differ)"
    assert people.at["attention", "held-out @value (published)"] == "1.40 [1.30, 1.50] (1.22)"


def test_a_pool_of_generalisation_runs_shows_the_held_out_readouts_beside_the_published():
    from pages.pooled import pooled_summary

    rows = study_rows().assign(acc_heldout=0.5)
    rows["heldout.acc_all"] = [0.58, 0.60, 0.62, 0.20, 0.22, 0.24]
    rows["heldout.attrib@value"] = [1.3, 1.4, 1.5, 0.0, 0.01, 0.02]
    table = pooled_summary(rows).set_index("architecture")
    assert table.at["mamba", "held-out acc (published, compared)"] == "0.22 [0.20, 0.24] (0.47 [0.41, 0.52], differ)"
    assert table.at["attention", "held-out @value (published)"] == "1.40 [1.30, 1.50] (1.22)"
    assert "held-out acc (published, compared)" not in pooled_summary(study_rows())  # not a generalisation pool


def test_terminal_labels_every_column_shows_chance_and_no_attributions_where_not_learned(tmp_path):
    rows = study_rows().assign(chance=0.25)
    rows.loc[rows["arch"] == "mamba", "verdict"] = "not learned"
    rows.loc[rows["arch"] == "mamba", "attrib@value"] = 1.18  # noise of a model that did not learn
    console = Console(record=True, width=250)
    print_summary(Report(tmp_path / "report.md", tmp_path / "report.html", summarise(rows)), console)
    lines = console.export_text().splitlines()
    header = next(line for line in lines if "┃ arch" in line)
    headers = [h.strip() for h in header.split("┃")[1:-1]]
    assert "" not in headers and "agrees" in headers and "chance" in headers
    for line in (next(x for x in lines if x.startswith(f"│ {arch} ")) for arch in ("attention", "mamba")):
        cells = dict(zip(headers, (c.strip() for c in line.split("│")[1:-1])))
        assert cells["chance"] == "0.25"
        assert (cells["@value"] == "–") == (cells["verdict"] == "not learned")
