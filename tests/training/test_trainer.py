import json
import pathlib

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

import mecheval
from mecheval.models import build_model
from mecheval.tasks import make_task
from mecheval.training import ConfigError, RunExistsError, train
from mecheval.training.checkpoint import CheckpointError, read_tensors
from mecheval.training.data import eval_sets
from mecheval.training.run_dir import CHECKPOINT, RunDir
from mecheval.training.trainer import Trainer, answer_logits, evaluate


def deterministic(records):
    """Metrics without the wall-clock fields."""
    return [{k: v for k, v in r.items() if k != "time"} for r in records]


def weights(run_dir):
    return load_file(str(pathlib.Path(run_dir) / "model.safetensors"))


def test_run_directory(tmp_path, tiny_config):
    cfg = tiny_config()
    summary = train(cfg, tmp_path / "run", quiet=True)
    run = RunDir(tmp_path / "run")
    assert {p.name for p in run.path.iterdir()} >= {"config.yaml", "metrics.jsonl", "model.safetensors", "summary.json"}
    assert not (run / CHECKPOINT).exists()  # dropped once finished
    assert run.read_config() == cfg
    records = run.read_metrics()
    assert [r["step"] for r in records] == list(range(4, 25, 4))
    assert [r["step"] for r in records if "eval" in r] == [12, 24]
    odd = RunDir(tmp_path / "odd")
    train(tiny_config(log_every=5, **{"eval.every": 7}), odd.path, quiet=True)  # cadences that rarely meet
    assert [r["step"] for r in odd.read_metrics()] == [5, 7, 10, 14, 15, 20, 21, 24]
    assert [r["step"] for r in odd.read_metrics() if "eval" in r] == [7, 14, 21, 24]
    assert summary == run.read_summary()
    assert summary["final"] == records[-1]["eval"] and set(summary["final"]) == {"train", "test"}
    assert summary["steps"] == 24 and summary["tokens"] == 24 * 16 * 13
    assert summary["versions"]["torch"] == torch.__version__ and summary["tokens_per_s"] > 0


def test_subnormals_are_flushed_while_training_only(tmp_path, tiny_config, monkeypatch):
    """Training on a CPU flushes subnormal floats (their slow path cost a Mamba run 4.6x); the processor
    setting is back to IEEE once the run ends, for the code that runs after it in the same thread."""
    from mecheval.training import trainer

    subnormal = torch.tensor([1e-40])
    seen = []
    step = trainer.Trainer.train_step
    monkeypatch.setattr(trainer.Trainer, "train_step", lambda self, b: (seen.append(float(subnormal * 1.0)), step(self, b)))
    train(tiny_config(), tmp_path / "run", quiet=True)
    assert seen and set(seen) == {0.0}
    assert float(subnormal * 1.0) > 0


def test_same_config_same_bits(tmp_path, tiny_config):
    cfg = tiny_config()
    train(cfg, tmp_path / "a", quiet=True)
    train(cfg, tmp_path / "b", quiet=True)
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert deterministic(RunDir(tmp_path / "a").read_metrics()) == deterministic(RunDir(tmp_path / "b").read_metrics())
    train(tiny_config(seed=1), tmp_path / "c", quiet=True)
    assert not torch.equal(wa["embed.weight"], weights(tmp_path / "c")["embed.weight"])


def test_resume_after_a_crash_is_bitwise_identical(tmp_path, tiny_config, monkeypatch):
    cfg = tiny_config(train_size=40)  # a fixed pool read in epochs: the data state matters too
    train(cfg, tmp_path / "ref", quiet=True)

    save = Trainer.checkpoint

    def crash_after_second(self):
        save(self)
        if self.step == 16:
            raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "checkpoint", crash_after_second)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", quiet=True)
    monkeypatch.undo()
    run = RunDir(tmp_path / "run")
    assert not run.finished and (run / CHECKPOINT).exists()
    with pytest.raises(RunExistsError):
        train(cfg, run.path, quiet=True)
    cpu_before = json.loads(read_tensors(run / CHECKPOINT)[1]["state"])["cpu_s"]
    summary = train(cfg, run.path, resume=True, quiet=True)
    assert 0 < cpu_before < summary["cpu_time_s"]  # the CPU time of both sessions, counted on from the checkpoint
    ref, out = weights(tmp_path / "ref"), weights(run.path)
    assert all(torch.equal(ref[k], out[k]) for k in ref)
    assert deterministic(run.read_metrics()) == deterministic(RunDir(tmp_path / "ref").read_metrics())


def test_resume_refuses_a_different_config(tmp_path, tiny_config):
    train(tiny_config(), tmp_path / "run", quiet=True)
    with pytest.raises(ConfigError, match="optim.lr"):
        train(tiny_config(**{"optim.lr": 1e-2}), tmp_path / "run", resume=True, quiet=True)
    # a finished run is not retrained; device/resources may differ
    assert train(tiny_config(**{"resources.num_cpus": 2}), tmp_path / "run", resume=True)["steps"] == 24


def test_a_checkpoint_of_another_config_is_refused(tmp_path, tiny_config):
    cfg = tiny_config()
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    trainer = Trainer(tiny_config(seed=5), run, quiet=True)
    trainer.checkpoint()
    with pytest.raises(CheckpointError, match="different config"):
        Trainer(cfg, run, quiet=True)
    (run / CHECKPOINT).write_bytes(b"\x00" * 100)
    with pytest.raises(CheckpointError, match="not a readable"):
        Trainer(cfg, run, quiet=True)


def test_loss_is_on_the_answer_only(tiny_config):
    cfg = tiny_config()
    task = make_task(cfg.task.name, **cfg.task.params)
    lm = build_model(cfg.model)
    batch = task.sample(8, seed=0)
    logits = answer_logits(lm, batch, amp=False)
    assert logits.shape == (8, cfg.model.vocab_size)  # the head ran only at answer_pos
    full = lm(batch.tokens)[torch.arange(8), batch.answer_pos]
    torch.testing.assert_close(logits, full)
    # changing tokens after the answer position changes nothing (causal; the answer is never an input)
    later = batch.tokens.clone()
    later[:, batch.answer_pos[0] + 1 :] = 0
    torch.testing.assert_close(answer_logits(lm, batch.with_tokens(later), amp=False), logits)
    m = evaluate(lm, batch, chunk=3, amp=False)
    assert m["acc"] == (logits.argmax(-1) == batch.answer).float().mean().item()
    assert m["loss"] == pytest.approx(F.cross_entropy(logits, batch.answer).item(), rel=1e-5)


def test_load_run(tmp_path, tiny_config):
    cfg = tiny_config()
    summary = train(cfg, tmp_path / "run", quiet=True)
    lm, task, config = mecheval.load_run(tmp_path / "run")
    assert config == cfg and task.vocab_size == cfg.model.vocab_size and not lm.training
    sets = eval_sets(task, cfg.eval.splits, cfg.eval.size, cfg.eval.seed)
    reloaded = {s: evaluate(lm, b, cfg.eval.batch_size, False) for s, b in sets.items()}
    assert reloaded == summary["final"]


def test_load_run_errors(tmp_path, tiny_config):
    with pytest.raises(FileNotFoundError):
        mecheval.load_run(tmp_path / "nothing")
    train(tiny_config(), tmp_path / "run", quiet=True)
    weights_file = tmp_path / "run" / "model.safetensors"
    good = weights_file.read_bytes()
    weights_file.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointError, match="not a readable"):
        mecheval.load_run(tmp_path / "run")
    weights_file.write_bytes(good)
    cfg_file = tmp_path / "run" / "config.yaml"
    cfg_file.write_text(cfg_file.read_text().replace("d_model: 16", "d_model: 32"))
    with pytest.raises(CheckpointError, match="different config"):
        mecheval.load_run(tmp_path / "run")
    weights_file.unlink()
    with pytest.raises(FileNotFoundError, match="no final weights"):
        mecheval.load_run(tmp_path / "run")


def test_nothing_is_ever_unpickled():
    src = pathlib.Path(mecheval.__file__).parent
    for part in ("training", "sweeps"):
        for path in (src / part).rglob("*.py"):
            text = path.read_text()
            assert "torch.load" not in text and "import pickle" not in text, path


def test_metrics_tolerate_a_torn_last_line(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 4}) + "\n" + json.dumps({"step": 8}) + "\n" + '{"step": 1')
    assert [r["step"] for r in run.read_metrics()] == [4, 8]
    run.truncate_metrics(4)
    assert [r["step"] for r in run.read_metrics()] == [4]


def test_bf16_is_ignored_on_cpu(tmp_path, tiny_config):
    plain, bf16 = train(tiny_config(), tmp_path / "a", quiet=True), train(tiny_config(bf16=True), tmp_path / "b", quiet=True)
    assert bf16["amp"] is None and bf16["final"] == plain["final"]


def test_loggers_are_off_by_default_and_fed_when_on(tmp_path, tiny_config, monkeypatch):
    import sys
    import types

    calls = []

    class Writer:
        def __init__(self, log_dir):
            calls.append(("dir", log_dir))

        def add_scalar(self, name, value, step):
            calls.append((name, step))

        def close(self):
            calls.append(("closed", None))

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=Writer))
    train(tiny_config(), tmp_path / "off", quiet=True)
    assert calls == []
    train(tiny_config(**{"loggers.tensorboard": True}), tmp_path / "on", quiet=True)
    assert calls[0] == ("dir", str(tmp_path / "on" / "tensorboard")) and calls[-1] == ("closed", None)
    assert ("eval/test/acc", 24) in calls and ("loss", 4) in calls
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    with pytest.raises(ImportError, match="wandb"):
        train(tiny_config(**{"loggers.wandb": True}), tmp_path / "wandb", quiet=True)


def test_early_stop_ends_the_run_after_patience_evaluations_at_the_threshold(tmp_path, tiny_config):
    """acc >= 0.0 holds at every evaluation: the run stops at the second (eval every 12 -> step 24 of 48);
    a threshold not reached runs to the end."""
    stop = train(tiny_config(steps=48, **{"early_stop": {"acc": 1e-9, "patience": 2}}), tmp_path / "stop", quiet=True)
    assert (stop["steps"], stop["stopped_early"]) == (24, True)
    assert [r["step"] for r in RunDir(tmp_path / "stop").read_metrics() if "eval" in r] == [12, 24]
    full = train(tiny_config(steps=24, **{"early_stop": {"acc": 1.0, "patience": 1}}), tmp_path / "full", quiet=True)
    first = [r["eval"]["test"]["acc"] for r in RunDir(tmp_path / "full").read_metrics() if "eval" in r][0]
    assert (full["steps"], full["stopped_early"]) == ((12, True) if first >= 1.0 else (24, False))


def test_early_stop_split_must_be_evaluated(tiny_config):
    with pytest.raises(ConfigError, match="early_stop.split 'heldout' is not evaluated"):
        tiny_config(**{"early_stop": {"split": "heldout"}})


# ------------------------------------------------------------------------------------------ snapshots

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mecheval.training.config import Snapshots  # noqa: E402
from mecheval.training.run_dir import load_snapshot, snapshot_steps  # noqa: E402


@settings(max_examples=50, deadline=None)
@given(total=st.integers(1, 5000), every=st.none() | st.integers(1, 700), log=st.none() | st.integers(2, 30))
def test_snapshot_schedule_holds_0_the_last_step_and_what_was_asked(total, every, log):
    if every is None and log is None:
        with pytest.raises(ValueError, match="every, log or steps"):
            Snapshots()
        return
    steps = Snapshots(every=every, log=log).schedule(total)
    assert steps == sorted(set(steps)) and steps[0] == 0 and steps[-1] == total
    assert all(0 <= s <= total for s in steps)
    if every:
        assert set(range(every, total + 1, every)) <= set(steps)
    if log:
        assert 1 in steps and len(steps) <= (total // every if every else 0) + log + 2


def test_snapshots_keep_the_weights_at_their_steps_and_change_nothing_else(tmp_path, tiny_config):
    plain = tiny_config()
    snap = tiny_config(snapshots={"every": 8, "steps": [3]})
    assert snap.fingerprint() == plain.fingerprint()  # not part of the run's identity
    train(plain, tmp_path / "plain", quiet=True)
    train(snap, tmp_path / "snap", quiet=True)
    assert not (tmp_path / "plain" / "snapshots").exists()  # off by default
    assert snapshot_steps(tmp_path / "snap") == [0, 3, 8, 16, 24]
    final = weights(tmp_path / "snap")
    assert all(torch.equal(final[k], weights(tmp_path / "plain")[k]) for k in final)
    lm = build_model(snap.model)
    load_snapshot(lm, tmp_path / "snap", 24)
    assert all(torch.equal(v, final[k]) for k, v in lm.state_dict().items())
    load_snapshot(lm, tmp_path / "snap", 8)
    assert not torch.equal(lm.state_dict()["embed.weight"], final["embed.weight"])  # an earlier point, not a copy


def test_a_snapshot_of_another_config_or_step_is_refused(tmp_path, tiny_config):
    train(tiny_config(snapshots={"every": 12}), tmp_path / "run", quiet=True)
    lm = build_model(tiny_config().model)
    with pytest.raises(CheckpointError, match="no snapshot at step 5"):
        load_snapshot(lm, tmp_path / "run", 5)
    other = RunDir(tmp_path / "other")
    train(tiny_config(seed=3, snapshots={"every": 12}), other.path, quiet=True)
    (other / "snapshots" / "step-0000012.safetensors").replace(tmp_path / "run" / "snapshots" / "step-0000012.safetensors")
    with pytest.raises(CheckpointError, match="different config"):
        load_snapshot(lm, tmp_path / "run", 12)
