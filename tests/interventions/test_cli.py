"""`mecheval intervene` on run directories (the run loader stubbed with a hand-built model)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from mecheval.commands import intervene
from tests.interventions.handbuilt import induction_lm, query_retrieval_lm


@pytest.fixture
def sweep(tmp_path, ar_task, monkeypatch):
    """A sweep dir with two finished runs; `load_run` returns the hand-built model named in the config."""
    models = {"induction": induction_lm, "query": query_retrieval_lm}
    for name in models:
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(f"model: {name}\n")
        (run / "model.safetensors").write_bytes(b"")
    (tmp_path / "runs" / "unfinished").mkdir()
    (tmp_path / "runs" / "unfinished" / "config.yaml").write_text("model: none\n")
    seq_len = ar_task.sample(1, seed=0).tokens.shape[1]

    def load_run(run_dir):
        name = (run_dir / "config.yaml").read_text().split(": ")[1].strip()
        return models[name](ar_task.vocab_size, seq_len), ar_task, None

    monkeypatch.setattr("mecheval.training.run_dir.load_run", load_run)
    return tmp_path


def test_intervene_sweep(sweep):
    app = typer.Typer()
    intervene.register(app)
    app.command("other")(lambda: None)  # keeps `intervene` a named sub-command
    result = CliRunner().invoke(
        app, ["intervene", str(sweep), "--n", "64", "--corrupt", "key", "--corrupt", "value", "--sites", "resid_pre"]
    )
    assert result.exit_code == 0, result.output
    assert "induction" in result.output
    for name, layer in [("induction", 1), ("query", 1)]:  # the 3-layer model is read where its answer forms
        run = sweep / "runs" / name
        df = pd.read_parquet(run / "interventions.parquet")
        assert set(df["corrupt"]) == {"key", "value"} and set(df["site"]) == {"resid_pre", "resid_post"}  # + profile
        verdict = json.loads((run / "verdict.json").read_text())
        assert (verdict["verdict"], verdict["layer"]) == ("induction", layer)
        assert verdict["acc_all"] == 1.0 and verdict["n_all"] == 64 and verdict["acc_all_lo"] > 0.9
        assert (run / "interventions" / "key_resid_pre.png").stat().st_size > 1000
        assert (run / "interventions" / "key_profile.png").stat().st_size > 1000
        assert (run / "interventions" / "value_resid_pre.png").exists()
    assert not (sweep / "runs" / "unfinished" / "interventions.parquet").exists()


def test_not_a_run_dir(tmp_path):
    app = typer.Typer()
    intervene.register(app)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["intervene", str(tmp_path)])
    text = " ".join("".join(c for c in result.output if c.isalnum() or c.isspace()).split())
    assert result.exit_code != 0 and "neither a finished run directory" in text


def test_intervene_by_attribution_patching(sweep):
    app = typer.Typer()
    intervene.register(app)
    app.command("other")(lambda: None)
    args = ["intervene", str(sweep / "runs" / "induction"), "--n", "32", "--sites", "resid_pre"]
    result = CliRunner().invoke(app, [*args, "--method", "gradient"])
    assert result.exit_code == 0, result.output
    df = pd.read_parquet(sweep / "runs" / "induction" / "interventions.parquet")
    assert set(df["method"]) == {"gradient"} and df["attrib"].notna().all()
    bad = CliRunner().invoke(app, [*args, "--method", "guess"])
    assert bad.exit_code == 2 and "--method" in bad.output and "guess" in bad.output


def test_intervene_verifies_the_top_cells(sweep):
    """--verify K: K cells per corrupt role patched exactly (column verified), the check printed; refused
    without --method gradient (exit 2, nothing written)."""
    app = typer.Typer()
    intervene.register(app)
    app.command("other")(lambda: None)
    run = sweep / "runs" / "induction"
    args = ["intervene", str(run), "--n", "32", "--sites", "resid_pre"]
    result = CliRunner().invoke(app, [*args, "--method", "gradient", "--verify", "2"])
    assert result.exit_code == 0, result.output
    df = pd.read_parquet(run / "interventions.parquet")
    main = df[df["subset"] == "all"]
    assert main["verified"].sum() == 2 and {"attrib_estimate", "error_budget"} <= set(df.columns)
    assert "2 of 15 cells patched exactly" in result.output and "largest error" in result.output
    (run / "interventions.parquet").unlink()
    bad = CliRunner().invoke(app, [*args, "--verify", "2"])
    assert bad.exit_code == 2 and "--verify" in bad.output and not (run / "interventions.parquet").exists()


def _intervene_untrained(tmp_path, ar_task, monkeypatch, preset, *args):
    """`mecheval intervene RUN *args` on an untrained `preset` model standing in for a run: (RUN, the CLI result)."""
    import torch

    from mecheval.models import build_model
    from tests.models.conftest import make_config

    run = tmp_path / preset
    run.mkdir()
    (run / "config.yaml").write_text("model: untrained\n")
    (run / "model.safetensors").write_bytes(b"")
    seq_len = ar_task.sample(1, seed=0).tokens.shape[1]
    torch.manual_seed(0)
    lm = build_model(make_config(preset, vocab_size=ar_task.vocab_size, max_len=seq_len))
    monkeypatch.setattr("mecheval.training.run_dir.load_run", lambda run_dir: (lm, ar_task, None))
    app = typer.Typer()
    intervene.register(app)
    app.command("other")(lambda: None)
    return run, CliRunner().invoke(app, ["intervene", str(run), *args], terminal_width=200)


def test_a_run_that_did_not_learn_shows_no_attributions(tmp_path, ar_task, monkeypatch):
    """An untrained model's verdict is `not learned`; its attributions (ratios of differences near 0) are noise,
    printed `–` as the reports print them, never as numbers beside the label."""
    run, result = _intervene_untrained(tmp_path, ar_task, monkeypatch, "attention", "--n", "64", "--sites", "resid_pre")
    assert result.exit_code == 0, result.output
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["verdict"] == "not learned"
    row = next(line for line in result.output.splitlines() if "not learned" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[4:7] == ["–", "–", "–"], row  # @key, @value, @query


def test_an_analysis_the_model_cannot_have_says_so_in_one_line(sweep):
    """--analysis conv-window / state on an attention model (no short conv, no recurrent state): one line each
    naming the run and what it lacks, the rest done as asked. A study's interventions call `intervene_run` with
    the same default note."""
    app = typer.Typer()
    intervene.register(app)
    app.command("other")(lambda: None)
    run = sweep / "runs" / "induction"
    result = CliRunner().invoke(app, ["intervene", str(run), "--n", "32", "--sites", "resid_pre",
                                      "--analysis", "conv-window,state,two-token,rotary"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "does not apply" in line]
    assert notes == ["induction: the conv-window analysis does not apply: the model has no short convolution (the "
                     "analysis reads where one binds key and value)",
                     "induction: the state analysis does not apply: the model has no recurrent state (the analysis "
                     "reads the answer each layer's state carries)",
                     "induction: the two-token analysis does not apply: the model has no two-token term (Mamba-3's "
                     "trapezoidal update, RWKV-7's token shift: the analysis zeroes it per layer)",
                     "induction: the rotary analysis does not apply: the model has no data-dependent rotation (Mamba-3's "
                     "rotary B and C: the analysis zeroes its angle steps per layer)"]
    assert (run / "verdict.json").exists() and not (run / "conv_window.parquet").exists()


def test_the_term_analyses_zero_mamba3s_previous_token_term_and_rotation_per_layer(tmp_path, ar_task, monkeypatch):
    """--analysis two-token,rotary on a Mamba-3 (no short conv): accuracy with each term zeroed in no layer, both,
    each, and at the value position alone or everywhere but there; one table per term."""
    run, result = _intervene_untrained(tmp_path, ar_task, monkeypatch, "mamba3", "--n", "32", "--sites", "resid_pre",
                                       "--analysis", "two-token,rotary")
    assert result.exit_code == 0, result.output
    for name in ("two_token.parquet", "rotary.parquet"):
        table = pd.read_parquet(run / name)
        assert list(table["layers"])[:6] == ["none", "0+1", "0", "1", "0+1@key", "0+1@not key"] and (table["n"] > 0).all()
        assert {"0+1@value", "0+1@not value", "0+1@query", "0+1@not query"} <= set(table["layers"])


PAIRS = Path(__file__).parents[2] / "results/cpu/attention-pairs/runs/seed-0"


@pytest.mark.skipif(not PAIRS.exists(), reason="the committed attention-pairs sweep is not in this checkout")
def test_relabel_outside_a_study_decides_each_run_anew_and_says_what_changed(tmp_path):
    """`mecheval relabel` on a folder of runs (a sweep's, no study.json): each readout decided by the current rules
    from its tables, one line each, naming the earlier label where it changes; --recheck there is refused in one
    line (it reads a study's settings), as is a folder without runs."""
    import shutil

    from mecheval.cli import app
    from mecheval.interventions.runs import VERDICT_RULES

    run = tmp_path / "sweep" / "runs" / "seed-0"
    shutil.copytree(PAIRS, run, ignore=shutil.ignore_patterns("interventions", "*.png"))
    verdict = json.loads((run / "verdict.json").read_text())
    (run / "verdict.json").write_text(json.dumps(verdict | {"verdict": "mixed", "rules": VERDICT_RULES - 1}))
    result = CliRunner().invoke(app, ["relabel", str(tmp_path / "sweep")])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{run}: {verdict['verdict']} (was mixed)"
    assert json.loads((run / "verdict.json").read_text())["rules"] == VERDICT_RULES
    refused = CliRunner().invoke(app, ["relabel", str(tmp_path / "sweep"), "--recheck"])
    assert refused.exit_code == 2 and "--repatch, --recheck and --terms read a study's readout settings" in refused.output
    (tmp_path / "empty").mkdir()
    empty = CliRunner().invoke(app, ["relabel", str(tmp_path / "empty")])
    assert empty.exit_code == 2 and "neither a finished run directory nor" in empty.output
