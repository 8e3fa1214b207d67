"""The readouts over training (`interventions.timeline`): a run whose weights switch at a known step."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.interventions.timeline import TIMELINE, formed_at, timeline
from mecheval.training import validate_config
from mecheval.training.checkpoint import atomic_save_tensors
from mecheval.training.run_dir import MODEL, RunDir, snapshot_name
from tests.interventions.handbuilt import conv_binding_lm, induction_lm

SWITCH = 300  # the step from which the run's weights are the hand-built induction model


def fake_run(path, task, steps=(0, 100, 200, 300, 400), build=induction_lm):
    """A run directory whose snapshots before SWITCH are an all-zero model (uniform output: not learned)
    and from SWITCH on the hand-built model `build` (induction); its final weights are the last snapshot."""
    T = task.sample(1, seed=0).tokens.shape[1]
    learned = build(task.vocab_size, T)
    blank = {k: torch.zeros_like(v) for k, v in learned.state_dict().items()}
    cfg = validate_config({"task": {"name": "ar", "params": {"n_pairs": 4, "n_keys": 16, "n_values": 16}},
                           "model": learned.cfg.model_dump(mode="json"), "steps": max(steps), "device": "cpu"})
    run = RunDir(path)
    run.path.mkdir()
    run.write_config(cfg)
    meta = {"fingerprint": cfg.fingerprint()}
    for s in steps:
        weights = learned.state_dict() if s >= SWITCH else blank
        (run / snapshot_name(s)).parent.mkdir(exist_ok=True)
        atomic_save_tensors(run / snapshot_name(s), weights, meta | {"step": str(s)})
    atomic_save_tensors(run / MODEL, learned.state_dict(), meta)
    return run.path


def test_the_timeline_reports_the_switch_at_its_step(tmp_path, ar_task):
    run = fake_run(tmp_path / "run", ar_task)
    t = timeline(run, n=64)
    per_step = t.drop_duplicates("step").set_index("step")
    assert list(per_step.index) == [0, 100, 200, 300, 400]
    assert list(per_step["verdict"]) == ["not learned"] * 3 + ["induction"] * 2
    assert formed_at(t) == SWITCH
    value = t[(t["role"] == "value") & (t["boundary"] == 1)].set_index("step")["attrib"]
    assert value[SWITCH] == pytest.approx(1, abs=1e-3) and (value[value.index >= SWITCH] > 0.99).all()
    assert (per_step.loc[[0, 100, 200], "acc"] < 0.2).all() and (per_step.loc[[300, 400], "acc"] == 1).all()
    learned = t[t["step"] >= SWITCH]  # (an untrained model's attribution is undefined: nothing to restore)
    assert (learned["attrib_lo"] <= learned["attrib"] + 1e-9).all() and (learned["attrib"] <= learned["attrib_hi"] + 1e-9).all()
    assert (pd.read_parquet(run / TIMELINE).drop_duplicates("step")["step"] == [0, 100, 200, 300, 400]).all()


def test_direct_retrieval_is_decided_over_training_as_at_the_end_by_the_joint_patch(tmp_path, ar_task):
    """Each snapshot patches the key and the query together (the row the final readout's direct-retrieval rule
    reads), so no snapshot falls back to the published sum (a warning) and the table keeps the three roles. The
    run: key and value bound in layer 1's short conv (direct retrieval) from SWITCH on."""
    run = fake_run(tmp_path / "run", ar_task, steps=(0, 300), build=lambda vocab, _: conv_binding_lm(vocab))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = timeline(run, n=64)
    assert list(t.drop_duplicates("step")["verdict"]) == ["not learned", "direct retrieval"]
    assert set(t["role"]) == {"key", "value", "query"} and (t["positions"] == "key,value,query,key&query").all()


def test_a_second_call_computes_only_new_snapshots_and_other_parameters_start_afresh(tmp_path, ar_task, monkeypatch):
    run = fake_run(tmp_path / "run", ar_task, steps=(0, 300))
    first = timeline(run, n=32)
    later = induction_lm(ar_task.vocab_size, ar_task.sample(1, seed=0).tokens.shape[1]).state_dict()
    atomic_save_tensors(run / snapshot_name(400), later, {"fingerprint": RunDir(run).read_config().fingerprint()})
    calls = []
    from mecheval.interventions import timeline as module

    real = module._readout
    monkeypatch.setattr(module, "_readout", lambda *a, **k: calls.append(1) or real(*a, **k))
    second = timeline(run, n=32)
    assert len(calls) == 1  # only step 400
    pd.testing.assert_frame_equal(second[second["step"] < 400].reset_index(drop=True), first.reset_index(drop=True))
    timeline(run, n=16)  # another batch size: every snapshot again
    assert len(calls) == 4


def test_over_training_cli_prints_when_the_mechanism_formed(tmp_path, ar_task):
    run = fake_run(tmp_path / "run", ar_task)
    result = CliRunner().invoke(app, ["intervene", str(run), "--over-training", "--n", "32"])
    assert result.exit_code == 0, result.output
    assert "induction" in result.output and str(SWITCH) in result.output
    plain = RunDir(tmp_path / "plain")
    plain.path.mkdir()
    (plain / "config.yaml").write_text((run / "config.yaml").read_text())
    (plain / MODEL).write_bytes((run / MODEL).read_bytes())
    result = CliRunner().invoke(app, ["intervene", str(plain.path), "--over-training", "--n", "32"])
    assert result.exit_code == 1 and "no snapshots" in result.output
