"""The Python API and `mecheval intervene` are one source of truth (the same defaults: examples, seed,
artefact control, joint key&query patch, read point), on the committed trained quick-study Mamba; the verdict
is read under key corruption only; `--out`; earlier readouts are kept or refused, never silently replaced."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.interventions import LABELS, N_EXAMPLES, interchange, mechanism

QUICK_MAMBA = Path(__file__).parents[2] / "results/cpu/quick/runs/preset-mamba_lr-0.003_seed-0"
pytestmark = pytest.mark.skipif(not QUICK_MAMBA.exists(), reason="the committed quick study is not in this checkout")


def intervene(*args: str):
    return CliRunner().invoke(app, ["intervene", str(QUICK_MAMBA), "--sites", "resid_pre", *args], env={"COLUMNS": "240"})


def test_the_api_as_a_user_calls_it_and_the_cli_give_one_verdict(tmp_path):
    from mecheval import load_run

    lm, task, _ = load_run(QUICK_MAMBA)
    batch = task.sample(N_EXAMPLES, seed=0, split="test")
    api = mechanism(interchange(lm, task, batch, "key", ["resid_pre"]))
    before = (QUICK_MAMBA / "verdict.json").read_bytes()
    result = intervene("--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    cli = json.loads((tmp_path / "verdict.json").read_text())
    assert (cli["verdict"], cli["layer"], cli["site"], cli["subset"], cli["n"]) == (api.label, api.layer, api.site, api.subset, api.n)
    assert api.subset == "outside" and api.n < N_EXAMPLES  # the artefact control applies in both
    for role, field in (("key", "key"), ("value", "value"), ("query", "query"), ("key&query", "joint")):
        assert cli[f"attrib@{role}"] == pytest.approx(getattr(api, f"attrib_{field}"), abs=1e-9)
        assert (cli[f"attrib@{role}_lo"], cli[f"attrib@{role}_hi"]) == pytest.approx(getattr(api, f"interval_{field}"), abs=1e-9)
    assert not math.isnan(api.attrib_joint)  # the joint patch is a default position of `interchange`
    assert (QUICK_MAMBA / "verdict.json").read_bytes() == before  # --out: the run directory is untouched


def test_corrupting_another_role_prints_no_key_corruption_label(tmp_path):
    result = intervene("--corrupt", "value", "--n", "128", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert not any(label in result.output for label in LABELS), result.output
    assert "no label" in result.output
    assert not (tmp_path / "verdict.json").exists()
    assert set(pd.read_parquet(tmp_path / "interventions.parquet")["corrupt"]) == {"value"}
    with pytest.raises(ValueError, match="rules are for key corruption"):
        mechanism(pd.read_parquet(tmp_path / "interventions.parquet"), corrupt="value")


def test_earlier_analyses_are_kept_and_other_kinds_refused(tmp_path):
    assert intervene("--n", "96", "--analysis", "conv-window", "--out", str(tmp_path)).exit_code == 0
    kept = {name: (tmp_path / name).read_bytes()
            for name in ("conv_window.parquet", "conv_ablation.parquet", "interventions/conv_window.png")}
    assert intervene("--n", "96", "--out", str(tmp_path)).exit_code == 0  # the same kind: replaced, window kept
    assert intervene("--n", "96", "--sites", "resid_pre,conv_out", "--out", str(tmp_path)).exit_code == 0  # a superset
    assert {name: (tmp_path / name).read_bytes() for name in kept} == kept
    assert json.loads((tmp_path / "verdict.json").read_text())["n"] < 96
    tables = (tmp_path / "interventions.parquet").read_bytes()
    for other in (["--corrupt", "value"], ["--direction", "necessity"], ["--method", "gradient"], ["--positions", "key+1"]):
        refused = intervene("--n", "64", *other, "--out", str(tmp_path))
        assert refused.exit_code == 2 and "--replace" in refused.output, refused.output
    assert (tmp_path / "interventions.parquet").read_bytes() == tables and (tmp_path / "verdict.json").exists()
    assert intervene("--n", "64", "--corrupt", "value", "--replace", "--out", str(tmp_path)).exit_code == 0
    assert not (tmp_path / "verdict.json").exists()  # it read the key-corruption table just replaced
    assert {name: (tmp_path / name).read_bytes() for name in kept} == kept


def test_cli_positions_take_offsets_and_integers(tmp_path):
    result = intervene("--positions", "key+1,query", "--positions", "5", "--n", "64", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    df = pd.read_parquet(tmp_path / "interventions.parquet")
    assert set(df["position"]) == {"key+1", "query", "5", "key&query"}  # + the joint patch the verdict reads
    assert not (tmp_path / "verdict.json").exists()  # no value position: no verdict to read
    bad = intervene("--positions", "key+x", "--out", str(tmp_path / "bad"))
    assert bad.exit_code == 2 and "--positions" in bad.output and not (tmp_path / "bad").exists()


def test_what_a_new_table_would_lose():
    from mecheval.interventions.runs import lost_readouts
    from mecheval.interventions.spec import ReadoutSpec

    old = pd.DataFrame({"corrupt": ["key", "value"], "direction": "sufficiency", "method": "exact", "layer": [0, 1],
                        "site": ["conv_out", "resid_pre"], "position": ["key+1", "query"]})
    assert lost_readouts(old, ReadoutSpec(corrupt=["key", "value"], positions=["key+1", "query"])) == []
    assert lost_readouts(old, ReadoutSpec(direction="necessity", method="gradient", sites=["resid_pre"])) == [
        "corrupt value", "direction sufficiency", "method exact", "sites layers.0.conv_out", "positions key+1"]


def test_default_positions_leave_the_joint_patch_out_of_state_sites(ar_task):
    """A state is patched at one position per example: the default key&query cell is not asked of it."""
    from mecheval.models import ModelConfig, build_model

    lm = build_model(ModelConfig(mixer="mamba", vocab_size=ar_task.vocab_size, d_model=16, n_layers=2)).eval()
    batch = ar_task.sample(16, seed=0)
    df = interchange(lm, ar_task, batch, "key", ["state", "resid_pre"], subsets=None, n_boot=10)
    assert "key&query" not in set(df[df["site"] == "state"]["position"])
    assert "key&query" in set(df[df["site"] == "resid_pre"]["position"])
    with pytest.raises(ValueError, match="one position per example"):
        interchange(lm, ar_task, batch, "key", ["state"], ["key&query"], subsets=None)


def test_a_readout_of_other_examples_is_not_silently_replaced(tmp_path):
    """Read again with another n (or seed, split), a readout is refused, naming the settings and the argument that
    forces it: in Python the argument, on the command line the flag."""
    from mecheval.interventions.runs import ReadoutKindError, intervene_run
    from mecheval.interventions.spec import ReadoutSpec

    assert intervene("--n", "64", "--out", str(tmp_path)).exit_code == 0
    before = (tmp_path / "verdict.json").read_bytes()
    with pytest.raises(ReadoutKindError, match=r"read with other settings \(`n` 64, not 96\).*`replace=True`") as e:
        intervene_run(QUICK_MAMBA, ReadoutSpec(n=96, sites=["resid_pre"]), out=tmp_path)
    assert "--" not in str(e.value)
    refused = intervene("--n", "64", "--seed", "1", "--out", str(tmp_path))
    assert refused.exit_code == 2 and "--seed 0, not 1" in refused.output and "--replace" in refused.output, refused.output
    assert (tmp_path / "verdict.json").read_bytes() == before
    intervene_run(QUICK_MAMBA, ReadoutSpec(n=96, sites=["resid_pre"]), out=tmp_path, replace=True)
    assert json.loads((tmp_path / "verdict.json").read_text())["n_examples"] == 96


def test_a_verdict_on_the_published_three_positions_names_the_rows_it_lacked():
    """The same table without the joint key&query rows: the sum leaves direct retrieval undecided, and the verdict
    says which rows would decide it and how to read them (a warning too); with them, direct retrieval."""
    df = pd.read_parquet(QUICK_MAMBA.parent / "preset-mamba_lr-0.003_seed-1" / "interventions.parquet")
    assert mechanism(df).label == "direct retrieval"
    with pytest.warns(UserWarning, match="lacks the rows that decide direct retrieval"):
        three = mechanism(df[df["position"].isin(["key", "value", "query"])])
    assert three.label == "inconclusive"
    assert "the key and the query patched together at the input of layer 1 (position 'key&query'" in three.detail
    assert 'positions=["key", "value", "query", "key&query"]' in three.detail
