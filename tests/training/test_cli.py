import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import types

import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.training import train
from mecheval.training.run_dir import CHECKPOINT, RunDir


@pytest.fixture
def config_file(tmp_path, tiny_config):
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(tiny_config().model_dump(mode="json")))
    return path


def test_train_command(tmp_path, config_file, tiny_config):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", str(config_file), "--out", str(out), "--set", "optim.lr=1e-2", "--set", "seed=7", "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output
    cfg = RunDir(out).read_config()
    assert (cfg.optim.lr, cfg.seed, cfg.device) == (1e-2, 7, "cpu")
    assert "acc[test]=" in result.output
    again = CliRunner().invoke(app, ["train", str(config_file), "--out", str(out), "--quiet"])
    assert again.exit_code == 2 and "--resume" in again.output
    resumed = CliRunner().invoke(app, ["train", "--out", str(out), "--resume", "--quiet"])  # its own config
    assert resumed.exit_code == 0 and "24 steps" in resumed.output


def test_train_from_flags_only(tmp_path):
    flags = ["task.name=ar", "task.params={n_pairs: 2, n_keys: 4, n_values: 4}", "model.d_model=8", "steps=3", "device=cpu"]
    result = CliRunner().invoke(app, ["train", "--out", str(tmp_path / "r"), "--quiet", *(a for f in flags for a in ("--set", f))])
    assert result.exit_code == 0, result.output
    assert RunDir(tmp_path / "r").read_summary()["steps"] == 3


def test_train_command_reports_the_bad_field(tmp_path, config_file):
    result = CliRunner().invoke(app, ["train", str(config_file), "--out", str(tmp_path / "r"), "--set", "optim.lr=-1"])
    assert result.exit_code == 2 and "optim.lr" in result.output
    assert not (tmp_path / "r").exists()



def test_a_start_without_the_loggers_package_leaves_no_trace(tmp_path, config_file, monkeypatch):
    """`train --tensorboard` without tensorboard installed: one error line naming the package, no run directory
    left behind, so the same command succeeds once the package is there."""
    out = tmp_path / "run"
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # not installed
    missing = CliRunner().invoke(app, ["train", str(config_file), "--out", str(out), "--tensorboard", "--quiet"])
    assert missing.exit_code == 2 and "pip install 'mecheval[loggers]'" in missing.output
    assert not out.exists()

    class Writer:  # a stand-in for the installed package
        def __init__(self, log_dir):
            pathlib.Path(log_dir).mkdir(parents=True)

        def add_scalar(self, name, value, step):
            pass

        def close(self):
            pass

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=Writer))
    retry = CliRunner().invoke(app, ["train", str(config_file), "--out", str(out), "--tensorboard", "--quiet"])
    assert retry.exit_code == 0, retry.output
    assert (out / "tensorboard").is_dir()

@pytest.mark.slow
def test_sigkill_then_resume_is_bitwise_identical(tmp_path, config_file, tiny_config):
    """A real process killed (SIGKILL) mid-run, then `--resume`d, ends with the uninterrupted weights."""
    sets = ["steps=200", "checkpoint_every=10", "train_size=100"]
    cfg = tiny_config(steps=200, checkpoint_every=10, train_size=100)
    cmd = [sys.executable, "-m", "mecheval.cli", "train", str(config_file), "--out", str(tmp_path / "run"), "--quiet"]
    cmd += [a for s in sets for a in ("--set", s)]
    proc = subprocess.Popen(cmd)
    ckpt = tmp_path / "run" / CHECKPOINT
    deadline = time.time() + 60
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with safe_open(str(ckpt), "pt") as f:
        killed_at = json.loads(f.metadata()["state"])["step"]
    assert 0 < killed_at < 200 and not RunDir(tmp_path / "run").finished

    train(cfg, tmp_path / "run", resume=True, quiet=True)
    train(cfg, tmp_path / "ref", quiet=True)  # uninterrupted, one thread like the CLI
    ref, out = load_file(str(tmp_path / "ref" / "model.safetensors")), load_file(str(tmp_path / "run" / "model.safetensors"))
    assert all(torch.equal(ref[k], out[k]) for k in ref)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "time"} for r in rs]  # noqa: E731
    assert strip(RunDir(tmp_path / "run").read_metrics()) == strip(RunDir(tmp_path / "ref").read_metrics())
