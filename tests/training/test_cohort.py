"""Cohorts: each member is its solo run. The loop engine bit for bit (the same kernels and optimiser, one thread);
the vmap engine (pure-PyTorch kernels, stacked AdamW) within VMAP_ATOL on every weight and VMAP_RTOL on every
logged loss, with the same accuracies; for every zoo architecture on a tiny AR task."""

import pathlib
import time

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from mecheval.models.presets import ARCHITECTURES
from mecheval.training import RunExistsError, train, validate_config
from mecheval.training.cohort import CohortError, train_cohort
from mecheval.training.run_dir import CHECKPOINT, RunDir
from mecheval.training.trainer import STOP, DivergedError, Trainer, TrainingInterrupted
from tests.plugins.modules.broken_mixers import CumMean

# the vmap engine's drift from the solo run after 12 AdamW steps at lr up to 1e-2 (measured: <= 1e-5 for most
# architectures, 3e-3 for H3, whose FFT kernel under vmap rounds differently and AdamW then amplifies it)
VMAP_ATOL, VMAP_RTOL = 1e-2, 1e-3
MEMBERS = [{"seed": 0, "optim.lr": 3e-3}, {"seed": 1, "optim.lr": 1e-2, "optim.weight_decay": 0.1}]


@pytest.fixture
def member_config(tiny_run):
    """`member_config(arch, **overrides)`: the suite's tiny AR run, shorter, with architecture `arch`."""
    short = {**tiny_run, "steps": 12, "log_every": 3, "checkpoint_every": 6, "eval": {"every": 6, "size": 32}}
    return lambda arch="attention", **overrides: validate_config(short, {"model.preset": arch, **overrides})


@pytest.fixture
def stop_clear():
    """The stop flag clear after the test, whatever happened."""
    yield
    STOP.clear()


def weights(run_dir) -> dict[str, torch.Tensor]:
    return load_file(str(pathlib.Path(run_dir) / "model.safetensors"))


def metrics(run_dir) -> list[dict]:
    """The logged records without wall-clock time."""
    return [{k: v for k, v in r.items() if k != "time"} for r in RunDir(run_dir).read_metrics()]


def solo_runs(configs, root: pathlib.Path) -> list[pathlib.Path]:
    for i, cfg in enumerate(configs):
        train(cfg, root / f"solo-{i}", quiet=True)
    return [root / f"solo-{i}" for i in range(len(configs))]


def cohort(configs, root: pathlib.Path, engine: str, **kwargs) -> tuple[list, list[pathlib.Path]]:
    dirs = [root / f"{engine}-{i}" for i in range(len(configs))]
    return train_cohort(list(zip(configs, dirs)), engine=engine, quiet=True, **kwargs), dirs


def assert_close_runs(got: pathlib.Path, ref: pathlib.Path) -> None:
    """Weights within VMAP_ATOL, logged losses within VMAP_RTOL, accuracies and everything else equal."""
    a, b = weights(got), weights(ref)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=VMAP_ATOL, rtol=0, msg=name)
    for x, y in zip(metrics(got), metrics(ref), strict=True):
        assert x.keys() == y.keys() and x["step"] == y["step"] and x["lr"] == pytest.approx(y["lr"], rel=1e-12)
        assert x["loss"] == pytest.approx(y["loss"], rel=VMAP_RTOL)
        for split in x.get("eval", {}):
            assert x["eval"][split]["loss"] == pytest.approx(y["eval"][split]["loss"], rel=VMAP_RTOL)
            assert x["eval"][split]["acc"] == y["eval"][split]["acc"]


def assert_same_run(got: pathlib.Path, ref: pathlib.Path, engine: str) -> None:
    """Loop: the same weights and metrics bit for bit; vmap: `assert_close_runs`."""
    if engine == "vmap":
        assert_close_runs(got, ref)
        return
    expected = weights(ref)
    assert all(torch.equal(w, expected[k]) for k, w in weights(got).items())
    assert metrics(got) == metrics(ref)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_members_are_their_solo_runs(tmp_path, member_config, arch):
    """Loop: bitwise (weights, metrics, summary); vmap: within the stated tolerances."""
    configs = [member_config(arch, **m) for m in MEMBERS]
    solos = solo_runs(configs, tmp_path)
    looped, loop_dirs = cohort(configs, tmp_path, "loop")
    stacked, vmap_dirs = cohort(configs, tmp_path, "vmap")
    for solo, loop_dir, vmap_dir, summary in zip(solos, loop_dirs, vmap_dirs, looped):
        assert_same_run(loop_dir, solo, "loop")
        same = ("steps", "final", "train_loss", "train_acc", "tokens", "fingerprint", "weights_sha256", "n_params")
        assert {k: summary[k] for k in same} == {k: RunDir(solo).read_summary()[k] for k in same}
        assert_same_run(vmap_dir, solo, "vmap")
        assert RunDir(vmap_dir).read_config() == RunDir(solo).read_config()
    assert [s["steps"] for s in stacked] == [12, 12]


@pytest.mark.parametrize("engine", ["loop", "vmap"])
def test_an_early_stop_freezes_one_member_and_not_the_others(tmp_path, member_config, engine):
    """Member 0 reaches 6% test accuracy at its first evaluation (step 6) and stops there; member 1 never does
    and trains on to step 12; each as its solo run."""
    configs = [member_config(**m, early_stop={"acc": 0.06, "patience": 1}) for m in MEMBERS]
    solos = solo_runs(configs, tmp_path)
    summaries, dirs = cohort(configs, tmp_path, engine)
    assert [(s["steps"], s["stopped_early"]) for s in summaries] == [(6, True), (12, False)]
    for got, ref in zip(dirs, solos):
        assert_same_run(got, ref, engine)


def test_a_member_records_the_time_of_its_solo_run(tmp_path, member_config, monkeypatch):
    """Not the finishing of the member before it (its weights and summary, slowed here to a second), which a solo
    run's time leaves out too."""
    finish = Trainer.finish

    def slow_finish(self):
        time.sleep(1.0)
        return finish(self)

    monkeypatch.setattr(Trainer, "finish", slow_finish)
    summaries, _ = cohort([member_config(**m) for m in MEMBERS], tmp_path, "loop")
    assert all(s["wall_time_s"] < 1.0 for s in summaries)


@pytest.mark.parametrize("engine", ["loop", "vmap"])
def test_a_diverging_member_fails_alone(tmp_path, member_config, engine):
    configs = [member_config(**MEMBERS[0]), member_config(seed=1, **{"optim.lr": 1e30})]
    results, dirs = cohort(configs, tmp_path, engine)
    assert isinstance(results[1], DivergedError) and "not finite" in str(results[1])
    assert not RunDir(dirs[1]).finished
    assert_same_run(dirs[0], solo_runs(configs[:1], tmp_path)[0], engine)


@pytest.mark.parametrize("engine", ["loop", "vmap"])
def test_a_cohort_checkpoint_resumes_every_member_in_a_cohort_or_alone(tmp_path, member_config, monkeypatch, stop_clear,
                                                                      engine):
    """Stopped at step 6 (the stop a sweep's Ctrl-C requests): every member's checkpoint saved. Member 0 then
    resumes alone, member 1 in a cohort with a fresh member 2 (which catches up on its own, the others frozen)."""
    configs = [member_config(**m) for m in MEMBERS] + [member_config(seed=2, **{"optim.lr": 1e-3})]
    solos = solo_runs(configs, tmp_path)
    after = Trainer.after_step
    monkeypatch.setattr(Trainer, "after_step", lambda self: (after(self), self.step == 6 and STOP.set())[0])
    with pytest.raises(TrainingInterrupted, match="2 unfinished runs' checkpoints saved"):
        cohort(configs[:2], tmp_path, engine)
    STOP.clear()
    monkeypatch.undo()
    dirs = [tmp_path / f"{engine}-{i}" for i in range(3)]
    assert all((d / CHECKPOINT).exists() and not RunDir(d).finished for d in dirs[:2])
    refused, _ = cohort(configs[:2], tmp_path, engine)  # a started run is resumed only when asked
    assert all(isinstance(r, RunExistsError) for r in refused)
    train(configs[0], dirs[0], resume=True, quiet=True)
    results = train_cohort([(configs[1], dirs[1]), (configs[2], dirs[2])], engine=engine, resume=True, quiet=True)
    assert [r["steps"] for r in results] == [12, 12]
    for got, ref in zip(dirs, solos):
        assert_same_run(got, ref, engine)


def test_members_may_differ_only_in_seed_rate_and_decay(tmp_path, member_config):
    configs = [member_config(), member_config(seed=1, batch_size=8)]
    with pytest.raises(CohortError, match="batch_size: 16 vs 8"):
        cohort(configs, tmp_path, "loop")
    assert not any(tmp_path.iterdir())  # refused before anything is written
    with pytest.raises(CohortError, match="unknown cohort engine 'fast'"):
        cohort(configs[:1], tmp_path, "fast")


class ItemScaled(CumMean):
    """A plug-in whose forward reads a value back to Python (`.item()`): vmap cannot run it."""

    def forward(self, x):
        return super().forward(x) / (1 + float(x.abs().max()))


def test_a_model_vmap_cannot_run_is_refused_by_name(tmp_path, member_config):
    mixer = f"{__name__}:ItemScaled"
    configs = [member_config(**{"model.mixer": mixer, "seed": s}) for s in (0, 1)]
    with pytest.raises(CohortError, match=rf"model \['{mixer}', '{mixer}'\]: its ops cannot run under torch.func.vmap.*'loop'"):
        cohort(configs, tmp_path, "vmap")
    summaries, _ = cohort(configs, tmp_path, "loop")
    assert [s["steps"] for s in summaries] == [12, 12]


def test_a_member_reads_the_verdict_of_its_solo_run(tmp_path, member_config):
    """Issue 54 item 4: a loop cohort's member (bitwise its solo run) gets its solo run's readouts: the same
    interventions table and verdict.json."""
    from mecheval.interventions.runs import intervene_run, read_verdict_file
    from mecheval.interventions.spec import ReadoutSpec

    configs = [member_config(**m) for m in MEMBERS]
    solo = solo_runs(configs[:1], tmp_path)[0]
    member = cohort(configs, tmp_path, "loop")[1][0]
    for run_dir in (solo, member):
        intervene_run(run_dir, ReadoutSpec(n=32, sites=["resid_pre"]), on_note=lambda note: None)
    assert read_verdict_file(member) == read_verdict_file(solo)
    tables = [pd.read_parquet(d / "interventions.parquet") for d in (member, solo)]
    pd.testing.assert_frame_equal(*tables, check_exact=True)
