import pandas as pd
import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.sweeps import SweepConfig, expand
from mecheval.training import train
from mecheval.training.run_dir import CHECKPOINT, RunDir
from mecheval.training.trainer import Trainer


def crash_midway(cfg, run_dir, monkeypatch):
    """Leaves `run_dir` as a run killed after its first checkpoint."""
    save = Trainer.checkpoint

    def crash(self):
        save(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "checkpoint", crash)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, run_dir, quiet=True)
    monkeypatch.undo()


def test_local_sweep_skips_finished_and_resumes_unfinished(tmp_path, base, monkeypatch):
    spec = {"base": base, "grid": {"seed": [0, 1], "optim.lr": [1e-3, 1e-2]}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    runs = {r.name: r for r in expand(SweepConfig.model_validate(spec))}
    assert sorted(runs) == ["lr-0.001_seed-0", "lr-0.001_seed-1", "lr-0.01_seed-0", "lr-0.01_seed-1"]
    unfinished = runs["lr-0.01_seed-1"]
    crash_midway(unfinished.config, out / "runs" / unfinished.name, monkeypatch)
    assert (out / "runs" / unfinished.name / CHECKPOINT).exists()

    cli = CliRunner()
    result = cli.invoke(app, ["sweep", str(tmp_path / "sweep.yaml"), "--out", str(out), "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "4 runs: 0 already finished, 4 trained, 0 failed" in result.output
    assert all(RunDir(out / "runs" / name).finished for name in runs)
    train(unfinished.config, tmp_path / "ref", quiet=True)  # the resumed run equals an uninterrupted one
    ref = load_file(str(tmp_path / "ref" / "model.safetensors"))
    got = load_file(str(out / "runs" / unfinished.name / "model.safetensors"))
    assert all(torch.equal(ref[k], got[k]) for k in ref)

    stamps = {n: (out / "runs" / n / "model.safetensors").stat().st_mtime_ns for n in runs}
    again = cli.invoke(app, ["sweep", str(tmp_path / "sweep.yaml"), "--out", str(out), "--workers", "2"])
    assert again.exit_code == 0 and "4 already finished, 0 trained" in again.output
    assert stamps == {n: (out / "runs" / n / "model.safetensors").stat().st_mtime_ns for n in runs}

    table = cli.invoke(app, ["runs", str(out), "--best-lr"], env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    df = pd.read_parquet(out / "runs.parquet")
    assert sorted(df["name"]) == sorted(runs) and set(df["status"]) == {"done"}
    assert {"optim.lr", "model.d_model", "task.params.n_pairs", "summary.final.test.acc", "summary.tokens_per_s"} <= set(df.columns)
    best = pd.read_parquet(out / "best_lr.parquet")
    assert sorted(best["seed"]) == [0, 1]
    for _, row in best.iterrows():
        assert row["summary.final.test.acc"] == df[df.seed == row.seed]["summary.final.test.acc"].max()
    assert "best lr: 2 of 4 runs" in table.output and all(name in table.output for name in best["name"])

