"""`run_study` end to end on a tiny study: runs, interventions, report; resuming redoes nothing.
Slow: the study trains in spawned worker processes (`make test-slow`)."""

import dataclasses
import json
import shutil

import pandas as pd
import pytest
from rich.console import Console

from mecheval.interventions.runs import split_dir
from mecheval.report.terminal import print_summary
from mecheval.study import run_study
from tests.study.conftest import TINY, TINY_HELDOUT

pytestmark = pytest.mark.slow


def test_every_run_is_trained_and_intervened(tiny_study):
    out, report = tiny_study
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == 4 and set(runs["status"]) == {"done"}
    for name in runs["name"]:
        verdict = json.loads((out / "runs" / name / "verdict.json").read_text())
        assert verdict["verdict"] in ("induction", "direct retrieval", "mixed", "not learned")
        # read where it should be, on the examples it says, with the accuracy it rests on
        assert (verdict["site"], verdict["layer"]) == ("resid_pre", 1) and verdict["subset"] in ("outside", "all")
        assert verdict["n"] == verdict[f"n_{verdict['subset']}"] and 0 < verdict["n"] <= 64
        assert verdict["acc_all_lo"] <= verdict["acc_all"] <= verdict["acc_all_hi"] and verdict["detail"]
        table = pd.read_parquet(out / "runs" / name / "interventions.parquet")
        assert set(table["corrupt"]) == {"key", "value"}
    # conv_out is patched where the model has one (attention and conv-less Mamba have none)
    assert all("conv_out" not in set(pd.read_parquet(p)["site"]) for p in out.glob("runs/*/interventions.parquet"))


def test_report_rows_are_the_architectures_with_their_labels(tiny_study):
    out, report = tiny_study
    # one row per architecture: the best of its two learning rates
    best = pd.read_parquet(out / "runs.parquet").groupby("model.preset")["summary.final.test.acc"].max()
    rows = dict(zip(report.summary["arch"], report.summary["acc"]))
    assert rows == {"attention": best["attention"], "mamba (d_conv 0)": best["mamba"]}
    text = report.markdown.read_text()
    for claim in ("Attention reaches high AR accuracy", "Mamba without its short convolution (d_conv 0) fails AR"):
        assert claim in text
    # h3/hyena were not in this study: their finding is counted as left out, not listed as "not run"
    assert "H3 and Hyena do poorly" not in text and "about architectures not in this study are left out" in text
    figures = report.html.parent / "figures"
    assert (figures / "accuracy.png").stat().st_size > 1000
    # a heatmap per architecture and site it has: the residual stream (block inputs, then outputs) and each
    # mixer's core output; and the layer profile per architecture
    heatmaps = sorted(p.name for p in figures.glob("heatmap_*.png"))
    assert heatmaps == ["heatmap_attention.png", "heatmap_attention_core_out.png", "heatmap_attention_resid_post.png",
                        "heatmap_mamba_d_conv_0.png", "heatmap_mamba_d_conv_0_core_out.png",
                        "heatmap_mamba_d_conv_0_resid_post.png"]
    assert sorted(p.name for p in figures.glob("profile_*.png")) == ["profile_attention.png", "profile_mamba_d_conv_0.png"]
    assert "Accuracy and the conv-reach artefact" in text
    assert text.index("heatmap_mamba_d_conv_0.png") < text.index("heatmap_mamba_d_conv_0_core_out.png")


def test_a_rebuilt_report_keeps_no_figure_it_did_not_draw(tiny_study):
    """A figure of an earlier build (another learning rate's run, an architecture since dropped) would sit
    beside the new ones as if it were this build's."""
    from mecheval.report import build_report

    out, _ = tiny_study
    figures = out / "figures"
    kept = sorted(p.name for p in figures.glob("*.png"))
    (figures / "state_mamba_old_run.png").write_bytes(b"stale")
    build_report(out)
    assert sorted(p.name for p in figures.glob("*.png")) == kept


def test_study_json_records_scale_and_time(tiny_study):
    out, _ = tiny_study
    assert not (out / "study.running.json").exists()  # the study ended: nothing marks it as running
    meta = json.loads((out / "study.json").read_text())
    assert meta["preset"] == "tiny" and meta["scale"] == "cpu" and meta["runs"] == 4
    assert meta["wall_time_s"] == meta["train_s"] + meta["intervene_s"] + meta["timeline_s"] > 0


def test_every_run_is_read_over_training_and_the_report_says_when_it_formed(tiny_study):
    out, report = tiny_study
    for run in (out / "runs").iterdir():
        table = pd.read_parquet(run / "timeline.parquet")
        steps = sorted(set(table["step"]))
        assert steps == [int(p.stem.removeprefix("step-")) for p in sorted(run.glob("snapshots/step-*.safetensors"))]
        assert steps[0] == 0 and steps[-1] == json.loads((run / "summary.json").read_text())["steps"]
    text = report.markdown.read_text()
    assert "When the mechanism formed" in text and "formed_at" in report.summary
    assert sorted(p.name for p in (report.html.parent / "figures").glob("timeline_*.png")) == [
        "timeline_attention.png", "timeline_mamba_d_conv_0.png", "timeline_overlay.png"]


def test_rerunning_a_finished_study_retrains_and_reintervenes_nothing(tiny_study):
    out, _ = tiny_study
    files = [*sorted(out.glob("runs/*/model.safetensors")), *sorted(out.glob("runs/*/interventions.parquet")),
             *sorted(out.glob("runs/*/timeline.parquet"))]
    before = {f: f.stat().st_mtime_ns for f in files}
    run_study(TINY, out, workers=1, n_examples=64, quiet=True)
    assert {f: f.stat().st_mtime_ns for f in files} == before


def test_a_run_that_diverges_is_reported_as_a_result_and_not_trained_again(tmp_path, capsys):
    study = dataclasses.replace(TINY, archs=TINY.archs[:1], cpu_lrs=[1e-3, 1e8], base={"optim.warmup": 0.0})
    report = run_study(study, tmp_path, workers=1, n_examples=32, quiet=True)
    runs = pd.read_parquet(tmp_path / "runs.parquet").set_index("optim.lr")
    assert runs.loc[1e8, "status"] == "diverged" and runs.loc[1e-3, "status"] == "done"
    assert runs.loc[1e8, "diverged.step"] >= 1 and pd.isna(runs.loc[1e8, "summary.final.test.acc"])
    diverged = runs.loc[1e8, "name"]
    assert json.loads((tmp_path / "study.json").read_text())["diverged"] == [diverged]
    assert not (tmp_path / "runs" / diverged / "verdict.json").exists()  # nothing to read
    assert (tmp_path / "runs" / runs.loc[1e-3, "name"] / "verdict.json").exists()
    assert "| diverged | " in report.markdown.read_text() and "not finite at step" in report.markdown.read_text()
    assert "(reported as diverged)" in capsys.readouterr().err
    record = (tmp_path / "runs" / diverged / "diverged.json").stat().st_mtime_ns
    run_study(study, tmp_path, workers=1, n_examples=32, quiet=True)  # the study resumed: the record is its result
    assert (tmp_path / "runs" / diverged / "diverged.json").stat().st_mtime_ns == record
    assert not (tmp_path / "runs" / diverged / "error.log").read_text().count("Traceback") > 1


def test_a_study_whose_every_run_diverged_still_reports_them(tmp_path):
    study = dataclasses.replace(TINY, archs=TINY.archs[:1], cpu_lrs=[1e8], base={"optim.warmup": 0.0})
    text = run_study(study, tmp_path, workers=1, n_examples=32, quiet=True).markdown.read_text()
    assert "No run of this study has finished" in text and "| diverged | " in text


def test_held_out_accuracy_is_reported_where_the_study_evaluates_it(tiny_heldout_study, tiny_study):
    out, report = tiny_heldout_study
    [name] = pd.read_parquet(out / "runs.parquet")["name"]
    summary = json.loads((out / "runs" / name / "summary.json").read_text())
    assert report.summary["acc_heldout"].tolist() == [summary["final"]["heldout"]["acc"]]
    assert report.summary["acc"].tolist() == [summary["final"]["test"]["acc"]]
    console = Console(record=True, width=200)
    print_summary(report, console)
    assert "heldout" in console.export_text()
    assert "held-out acc (published, compared)" in report.markdown.read_text()
    # a study without the split has no such column
    assert "acc_heldout" not in tiny_study[1].summary


def test_a_further_split_is_intervened_on_its_own_examples_and_reported(tiny_heldout_study):
    from mecheval import load_run
    from mecheval.interventions.accuracy import example_ids

    out, report = tiny_heldout_study
    [run_dir] = sorted((out / "runs").iterdir())
    heldout = split_dir(run_dir, "heldout")
    _, task, _ = load_run(run_dir)
    ids = pd.read_parquet(heldout / "examples.parquet")["id"].tolist()
    assert ids == example_ids(task.sample(32, seed=0, split="heldout"))  # the held-out pairs, not the test split's
    assert ids != pd.read_parquet(run_dir / "examples.parquet")["id"].tolist()
    verdict = json.loads((heldout / "verdict.json").read_text())
    assert report.summary["heldout.attrib@value"].tolist() == pytest.approx([verdict["attrib@value"]])
    assert report.summary["published_heldout_acc"].tolist() == [0.35]  # attention at d = 16
    assert "held-out @value" in report.markdown.read_text()
    before = (heldout / "verdict.json").stat().st_mtime_ns  # resumed: read once
    run_study(TINY_HELDOUT, out, workers=1, n_examples=32, quiet=True)
    assert (heldout / "verdict.json").stat().st_mtime_ns == before
    (heldout / "verdict.json").write_text("{")  # left invalid: read again
    run_study(TINY_HELDOUT, out, workers=1, n_examples=32, quiet=True)
    # the fixture patched with the default threads, this test runs on one: the same to float rounding
    assert json.loads((heldout / "verdict.json").read_text())["attrib@value"] == pytest.approx(verdict["attrib@value"], rel=1e-3)


def test_an_unreadable_run_is_skipped_by_the_study_interventions(tiny_study, tmp_path, capsys):
    out = tmp_path / "copy"
    shutil.copytree(tiny_study[0], out)
    bad = sorted((out / "runs").iterdir())[0]
    (bad / "verdict.json").unlink()
    (bad / "model.safetensors").write_bytes((bad / "model.safetensors").read_bytes()[:100])  # truncated
    report = run_study(TINY, out, workers=1, n_examples=64, quiet=True)
    meta = json.loads((out / "study.json").read_text())
    assert meta["not_intervened"] == [bad.name]
    assert f"skipped interventions of {bad.name}" in capsys.readouterr().err
    assert report.html.exists() and not (bad / "verdict.json").exists()


def test_verdicts_of_earlier_rules_are_decided_anew_without_retraining(tiny_study, tmp_path):
    """A verdict.json without the current `rules` (a study made before interval-decided labels) is decided
    again from its tables when the study is re-run; its weights and tables stay untouched."""
    import json
    import shutil

    from mecheval.interventions.runs import VERDICT_RULES, relabel_run, verdict_is_current

    out = tmp_path / "study"
    shutil.copytree(tiny_study[0], out)
    verdicts = sorted(out.glob("runs/*/verdict.json"))
    assert verdicts and all(verdict_is_current(v.parent) for v in verdicts)
    for v in verdicts:  # the full-window readout is written beside the verdict and read by it
        assert (v.parent / "carriers.parquet").exists() and "window@carriers" in json.loads(v.read_text())
    for v in verdicts:  # as the earlier rules wrote it: a point-estimate label, no `rules`
        row = json.loads(v.read_text())
        v.write_text(json.dumps({k: val for k, val in row.items() if k != "rules"} | {"verdict": "mixed"}))
    weights = {p: p.read_bytes() for p in out.glob("runs/*/model.safetensors")}
    tables = {p: p.read_bytes() for p in out.glob("runs/*/interventions.parquet")}
    run_study(TINY, out, workers=1, n_examples=64, quiet=True)
    assert all(verdict_is_current(v.parent) for v in verdicts)
    assert {p: p.read_bytes() for p in weights} == weights and {p: p.read_bytes() for p in tables} == tables
    for v in verdicts:
        original = json.loads((tiny_study[0] / v.relative_to(out)).read_text())
        assert json.loads(v.read_text())["verdict"] == original["verdict"]
        assert relabel_run(v.parent, 0.01).label == original["verdict"] and json.loads(v.read_text())["rules"] == VERDICT_RULES


def test_relabel_writes_the_per_example_table_that_intervene_writes(tiny_study, tmp_path, monkeypatch):
    """A study intervened on before examples.parquet existed gets it from `mecheval relabel`: the same examples
    (ids) and answers as `intervene` wrote, so like-for-like comparisons read old and new runs alike."""
    import shutil

    from mecheval.study import run as study_run

    monkeypatch.setitem(study_run.STUDIES, TINY.name, TINY)
    out = tmp_path / "study"
    shutil.copytree(tiny_study[0], out)
    tables = sorted(out.glob("runs/*/examples.parquet"))
    assert len(tables) == len(list(out.glob("runs/*/verdict.json"))) > 0
    written = {p: pd.read_parquet(p) for p in tables}
    for p in tables:
        p.unlink()
    study_run.relabel_study(out)
    for p, table in written.items():
        pd.testing.assert_frame_equal(pd.read_parquet(p), table)


def test_intervene_on_a_relative_run_directory_replaces_its_figures(tiny_study, tmp_path, monkeypatch):
    """`mecheval study quick --out out/quick` intervenes on relative run paths whose earlier figures it replaces."""
    from pathlib import Path

    from mecheval.interventions.runs import intervene_run
    from mecheval.interventions.spec import ReadoutSpec

    shutil.copytree(tiny_study[0], tmp_path / "study")
    monkeypatch.chdir(tmp_path)
    run = sorted(Path("study/runs").iterdir())[0]
    assert list((run / "interventions").glob("*.png"))
    intervene_run(run, ReadoutSpec(n=16, sites=["resid_pre"]), replace=True)
    assert (run / "verdict.json").exists() and list((run / "interventions").glob("*.png"))


def test_recheck_brings_earlier_verdicts_to_the_current_rules(tiny_study, tmp_path, monkeypatch):
    """`mecheval relabel --recheck` on verdicts of earlier rules: each is decided anew, says which prompts it read,
    and its per-example table is that of the prompts `intervene` reads now (unseen in training)."""
    from mecheval import load_run
    from mecheval.interventions.accuracy import example_ids
    from mecheval.interventions.runs import PROMPT_FIELDS, verdict_is_current
    from mecheval.study import run as study_run
    from mecheval.training.prompts import run_training_ids, unseen_sample

    monkeypatch.setitem(study_run.STUDIES, TINY.name, TINY)
    out = tmp_path / "study"
    shutil.copytree(tiny_study[0], out)
    verdicts = sorted(out.glob("runs/*/verdict.json"))
    for path in verdicts:
        row = {k: v for k, v in json.loads(path.read_text()).items() if k not in PROMPT_FIELDS}
        path.write_text(json.dumps(row | {"rules": 3}))
        assert not verdict_is_current(path.parent)
    study_run.relabel_study(out, recheck=True)
    for path in verdicts:
        run = path.parent
        row = json.loads(path.read_text())
        assert verdict_is_current(run) and row["prompts"] == "unseen" and 0 <= row["seen_share"] < 1
        _, task, cfg = load_run(run)
        batch, _ = unseen_sample(task, 64, 0, "test", run_training_ids(run, cfg))
        assert pd.read_parquet(run / "examples.parquet")["id"].tolist() == example_ids(batch)


def test_without_training_a_study_reads_the_runs_finished_so_far(tiny_study, tmp_path):
    """train=False (a study stopped partway): a finished run without readouts is read, an unfinished one is
    neither trained nor read, and the report is written."""
    out = tmp_path / "copy"
    shutil.copytree(tiny_study[0], out)
    unfinished, unread = sorted((out / "runs").iterdir())[:2]
    for path in (unfinished / "summary.json", unfinished / "verdict.json", unread / "verdict.json", out / "report.md"):
        path.unlink()
    run_study(TINY, out, workers=1, n_examples=64, quiet=True, train=False)
    assert (unread / "verdict.json").exists() and (out / "report.md").exists()
    assert not (unfinished / "summary.json").exists() and not (unfinished / "verdict.json").exists()


def test_a_repatch_leaves_the_analyses_kept_and_keep_alone_is_refused(tiny_study, tmp_path, monkeypatch):
    """`mecheval relabel STUDY --repatch --keep state,conv-window`: every run patched again with the study's
    settings but those analyses, whose files stay as they were (how a new analysis joins a study's runs without
    the state readout's minutes); --keep without --repatch, or an unknown analysis: one line, exit 2."""
    from typer.testing import CliRunner

    from mecheval.cli import app
    from mecheval.study import run as study_run

    monkeypatch.setitem(study_run.STUDIES, TINY.name, TINY)
    out = tmp_path / "study"
    shutil.copytree(tiny_study[0], out)
    calls = []
    monkeypatch.setattr(study_run, "_intervene",
                        lambda run_dir, study, n, split="test", skip=(): calls.append((run_dir.name, split, skip)))
    result = CliRunner().invoke(app, ["relabel", str(out), "--repatch", "--keep", "state,conv-window"])
    assert result.exit_code == 0, result.output
    runs = sorted(p.parent.name for p in out.glob("runs/*/interventions.parquet"))
    assert calls == [(name, "test", ("state", "conv-window")) for name in runs] and runs
    for args, words in ((["--keep", "state"], "--keep goes with --repatch"),
                        (["--repatch", "--keep", "states"], "unknown analyses ['states']")):
        refused = CliRunner().invoke(app, ["relabel", str(out), *args])
        assert refused.exit_code == 2 and words in refused.output


def test_relabel_terms_rereads_only_the_term_tables_of_the_runs_with_weights(tiny_study, tmp_path, monkeypatch):
    """`mecheval relabel STUDY --terms`: each run with weights has its term tables computed again with the study's
    readout settings (`reread_terms`), nothing patched or decided anew; a run without weights is left as it is;
    --terms beside --repatch, or outside a study: one line, exit 2."""
    from typer.testing import CliRunner

    from mecheval.cli import app
    from mecheval.study import run as study_run

    monkeypatch.setitem(study_run.STUDIES, TINY.name, TINY)
    out = tmp_path / "study"
    shutil.copytree(tiny_study[0], out)
    runs = sorted(p.parent for p in out.glob("runs/*/interventions.parquet"))
    (runs[0] / "model.safetensors").unlink()
    calls, patched = [], []
    monkeypatch.setattr(study_run, "reread_terms", lambda run_dir, spec: calls.append((run_dir.name, spec.n, spec.split)))
    monkeypatch.setattr(study_run, "_intervene", lambda *args, **kwargs: patched.append(args))
    monkeypatch.setattr(study_run, "relabel_run", lambda *args, **kwargs: patched.append(args))
    result = CliRunner().invoke(app, ["relabel", str(out), "--terms"])
    assert result.exit_code == 0, result.output
    n = json.loads((out / "study.json").read_text())["n_examples"]
    assert calls == [(run.name, n, "test") for run in runs[1:]] and len(runs) > 1 and not patched
    for where, args, words in ((out, ["--terms", "--repatch"], "--terms goes alone"),
                               (out / "runs", ["--terms"], "--terms read a study's readout settings")):
        refused = CliRunner().invoke(app, ["relabel", str(where), *args])
        assert refused.exit_code == 2 and words in refused.output


def test_a_run_committed_without_weights_is_decided_from_its_tables_on_a_repatch(tiny_study, tmp_path, monkeypatch, capsys):
    """A repatch or recheck loads weights; a run committed without them (one that did not learn) is decided anew
    from its tables instead and named in one line, the others patched as asked."""
    from mecheval.study import run as study_run

    monkeypatch.setitem(study_run.STUDIES, TINY.name, TINY)
    out = tmp_path / "study"
    shutil.copytree(tiny_study[0], out)
    runs = sorted(p.parent for p in out.glob("runs/*/interventions.parquet"))
    (runs[0] / "model.safetensors").unlink()
    patched = []
    monkeypatch.setattr(study_run, "_intervene", lambda run_dir, *a, **k: patched.append(run_dir))
    study_run.relabel_study(out, repatch=True)
    assert patched == runs[1:] and len(runs) > 1
    assert f"{runs[0].name}: decided from its tables (committed without its weights" in capsys.readouterr().err
