"""`length_groups`: a batch computed in groups of similar length, each at its own length, gives the padded
batch's loss, gradients, evaluation and intervention scores (issue: pay for tokens, not padding)."""

from __future__ import annotations

import pytest
import torch

from mecheval.interventions import interchange
from mecheval.models import build_model
from mecheval.tasks import length_groups, make_task
from mecheval.training import validate_config
from mecheval.training.trainer import backward, evaluate
from tests.models.conftest import ARCHS, make_config


def atr_batch(n: int = 24, seed: int = 3):
    """ATR easy examples of mixed lengths (the padded batch is far longer than most of them)."""
    task = make_task("atr", grammar="easy")
    batch = task.sample(n, seed, "train")
    assert batch.lengths.min() < batch.lengths.max()
    return task, batch


@pytest.mark.parametrize("lengths, n, expected", [
    ([5, 5, 5, 5], 4, [[5, 5, 5, 5]]),  # one length: one group, whatever n
    ([3, 1, 2, 8, 9, 30], 1, [[1, 2, 3, 8, 9, 30]]),
    ([3, 1, 2, 8, 9, 30], 3, [[1, 2, 3], [8, 9], [30]]),  # 3 + 18 + 30 tokens, the least of any 3 groups
    ([10, 10, 11, 1, 2, 3], 2, [[1, 2, 3], [10, 10, 11]]),
    ([4, 4, 9], 8, [[4, 4], [9]]),  # never more groups than lengths
])
def test_groups_minimise_padded_tokens(lengths, n, expected):
    groups = length_groups(torch.tensor(lengths), n)
    assert [torch.tensor(lengths)[g].tolist() for g in groups] == expected
    assert sorted(torch.cat(groups).tolist()) == list(range(len(lengths)))


def test_groups_are_optimal_against_brute_force():
    from itertools import combinations

    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        lengths = torch.randint(1, 40, (9,), generator=g)
        s = sorted(lengths.tolist())
        best = min(
            sum((b - a) * s[b - 1] for a, b in zip((0, *cuts), (*cuts, len(s))))
            for k in range(3) for cuts in combinations(range(1, len(s)), k)
        )
        got = sum(len(r) * int(lengths[r].max()) for r in length_groups(lengths, 3))
        assert got == best


def test_a_bad_group_count_is_refused():
    with pytest.raises(ValueError, match="length_groups must be >= 1"):
        length_groups(torch.tensor([1, 2]), 0)
    with pytest.raises(ValueError, match="length_groups"):
        validate_config({"task": {"name": "ar"}, "model": {"preset": "attention"}, "steps": 1, "length_groups": 0})


@pytest.mark.parametrize("arch", ARCHS)
def test_loss_and_every_gradient_equal_the_padded_batch(arch):
    task, batch = atr_batch()
    torch.manual_seed(0)
    lm = build_model(make_config(arch, vocab_size=task.vocab_size, max_len=int(batch.tokens.shape[1])))
    lm.train()
    grads, results = [], []
    for groups in (1, 4):
        lm.zero_grad(set_to_none=True)
        loss, correct = backward(lm, batch, groups, amp=False)
        results.append((loss.item(), int(correct)))
        grads.append({k: p.grad.clone() for k, p in lm.named_parameters() if p.grad is not None})
    assert results[0][1] == results[1][1]
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-5, abs=1e-6)
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=1e-6, msg=f"{arch}: {name}")


def test_evaluation_and_interventions_equal_the_padded_batch():
    task, batch = atr_batch(40)
    torch.manual_seed(0)
    lm = build_model(make_config("mamba", vocab_size=task.vocab_size, max_len=int(batch.tokens.shape[1])))
    padded, grouped = (evaluate(lm, batch, chunk=7, amp=False, groups=g) for g in (1, 4))
    assert grouped["acc"] == padded["acc"]
    assert grouped["loss"] == pytest.approx(padded["loss"], rel=1e-5)
    kw = dict(corrupt="key", sites=["resid_pre", "layers.0.state"], positions=["key", "value", "query"], per_example=True)
    a, b = (interchange(lm, task, batch, length_groups=g, **kw) for g in (1, 4))
    assert (a[["layer", "site", "position", "example"]].values == b[["layer", "site", "position", "example"]].values).all()
    for col in ("p_clean", "p_corrupt", "p_patched"):
        torch.testing.assert_close(torch.tensor(b[col].values), torch.tensor(a[col].values), rtol=1e-4, atol=1e-6)


def test_grouped_run_resumes_bitwise_and_records_its_groups(tmp_path):
    from mecheval.training import train

    cfg = validate_config({
        "task": {"name": "atr", "params": {"grammar": "easy"}}, "model": {"preset": "mamba", "d_model": 16, "n_layers": 1},
        "steps": 6, "batch_size": 8, "length_groups": 3, "log_every": 1, "checkpoint_every": 3,
        "eval": {"every": 3, "size": 16}, "device": "cpu",
    })
    assert cfg.fingerprint() != cfg.model_copy(update={"length_groups": 1}).fingerprint()
    whole = train(cfg, tmp_path / "whole", quiet=True)
    from mecheval.training import trainer

    trainer.STOP.clear()
    original = trainer.Trainer.train_step

    def stop_after_four(self, batch):
        original(self, batch)
        if self.step == 4:
            trainer.STOP.set()

    trainer.Trainer.train_step = stop_after_four
    try:
        with pytest.raises(trainer.TrainingInterrupted):
            train(cfg, tmp_path / "split", quiet=True)
    finally:
        trainer.Trainer.train_step = original
        trainer.STOP.clear()
    resumed = train(cfg, tmp_path / "split", resume=True, quiet=True)
    assert resumed["final"] == whole["final"] and resumed["train_loss"] == whole["train_loss"]
    assert (tmp_path / "whole" / "model.safetensors").read_bytes() == (tmp_path / "split" / "model.safetensors").read_bytes()
    assert "length_groups: 3" in (tmp_path / "split" / "config.yaml").read_text()


def test_batch_map_and_to_device_keep_every_field():
    """`Batch.map` reaches every tensor (tokens, lengths, answers, roles, extras); `to_device` copies to the
    trainer's device, on a GPU from pinned memory (the CPU keeps queuing steps while it copies)."""
    _, batch = atr_batch(6)
    doubled = batch.map(lambda t: t * 2)
    for name in ("tokens", "lengths", "answer", "answer_pos"):
        assert torch.equal(getattr(doubled, name), getattr(batch, name) * 2)
    assert doubled.roles.keys() == batch.roles.keys() and doubled.extra.keys() == batch.extra.keys() and batch.extra
    assert all(torch.equal(doubled.extra[k], v * 2) for k, v in batch.extra.items())
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    for device in devices:
        moved = batch.to_device(device)
        assert moved.tokens.device.type == device.type and moved.extra["parent"].device.type == device.type
        assert torch.equal(moved.to("cpu").tokens, batch.tokens)


ATR = {"task": {"name": "atr", "params": {"grammar": "medium"}}, "model": {"preset": "mamba"}, "steps": 1}


def test_a_task_whose_lengths_vary_chooses_the_groups_and_an_explicit_setting_wins():
    """Without `length_groups` a config takes the task's (`Task.length_groups`): ATR's documents vary in length,
    AR's have one (one group, the identity of every AR run kept); a value given is kept."""
    from mecheval.tasks.atr.task import LENGTH_GROUPS

    assert LENGTH_GROUPS > 1 and make_task("atr").length_groups == LENGTH_GROUPS
    assert validate_config(ATR).length_groups == LENGTH_GROUPS
    assert validate_config(ATR, {"length_groups": 1}).length_groups == 1
    ar = validate_config({**ATR, "task": {"name": "ar"}})
    assert ar.length_groups == 1 and "length_groups" not in ar.identity()


def test_train_pays_for_tokens_by_default_and_an_older_run_keeps_its_padded_batch(tmp_path):
    """`mecheval train` on ATR writes the task's groups into the run's config and resumes it from that; a run
    whose config.yaml predates the field (no `length_groups`: it trained with the padded batch) reads back with
    1, its fingerprint unchanged, and resumes as such."""
    import yaml
    from typer.testing import CliRunner

    from mecheval.cli import app
    from mecheval.tasks.atr.task import LENGTH_GROUPS
    from mecheval.training.run_dir import RunDir

    sets = ["task.name=atr", "model.preset=mamba", "model.d_model=8", "model.n_layers=1", "steps=2", "batch_size=4",
            "eval.size=8", "device=cpu"]
    args = ["train", "--quiet", *(a for s in sets for a in ("--set", s))]
    new = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "new")])
    assert new.exit_code == 0, new.output
    assert RunDir(tmp_path / "new").read_config().length_groups == LENGTH_GROUPS
    assert CliRunner().invoke(app, ["train", "--out", str(tmp_path / "new"), "--resume", "--quiet"]).exit_code == 0

    old = CliRunner().invoke(app, [*args, "--set", "length_groups=1", "--out", str(tmp_path / "old")])
    assert old.exit_code == 0, old.output
    path = tmp_path / "old" / "config.yaml"
    written = yaml.safe_load(path.read_text())
    del written["length_groups"]  # as runs made before the field wrote it
    path.write_text(yaml.safe_dump(written, sort_keys=False))
    run = RunDir(tmp_path / "old")
    assert run.read_config().length_groups == 1
    assert run.read_config().fingerprint() == run.read_summary()["fingerprint"]
    resumed = CliRunner().invoke(app, ["train", "--out", str(tmp_path / "old"), "--resume", "--quiet"])
    assert resumed.exit_code == 0, resumed.output


def test_committed_runs_made_before_the_field_keep_their_identity():
    """Every committed ATR run whose config.yaml has no `length_groups` (it trained with the padded batch) reads back
    with the fingerprint its summary records, so its study resumes and its weights load."""
    from pathlib import Path

    from mecheval.training.run_dir import RunDir

    configs = sorted((Path(__file__).resolve().parents[2] / "results").rglob("runs/*/config.yaml"))
    older = [RunDir(p.parent) for p in configs if "name: atr" in (t := p.read_text()) and "length_groups" not in t]
    assert older
    for run in older:
        assert run.read_config().fingerprint() == run.read_summary()["fingerprint"], run.path
