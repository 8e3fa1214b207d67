"""Failure is never passed off as success (issue 38): a diverging run stops naming the step, a plug-in
that exits or raises at import fails the command naming its import path, and config numbers and
encodings that cannot be meant give one line naming the field or file, exit 2."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.training import validate_config
from mecheval.training.run_dir import CHECKPOINT, DIVERGED, METRICS, MODEL, SUMMARY, RunDir
from mecheval.training.trainer import DivergedError, train


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_error_line(result, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


def test_a_diverging_run_stops_naming_the_step_and_saves_nothing_of_it(tiny_run, tmp_path):
    cfg = validate_config(tiny_run, {"optim.lr": 1e8, "optim.warmup": 0.0})
    with pytest.raises(DivergedError, match=r"not finite at step \d+ \(optim.lr 1e\+08\)"):
        train(cfg, tmp_path / "run", quiet=True)
    assert not (tmp_path / "run" / MODEL).exists() and not (tmp_path / "run" / SUMMARY).exists()
    assert not (tmp_path / "run" / CHECKPOINT).exists()  # the first checkpoint (step 8) came after the NaN


def test_a_diverged_run_is_recorded_and_not_trained_again(tiny_run, tmp_path):
    cfg = validate_config(tiny_run, {"optim.lr": 1e8, "optim.warmup": 0.0})
    with pytest.raises(DivergedError):
        train(cfg, tmp_path / "run", quiet=True)
    run = RunDir(tmp_path / "run")
    record = run.read_divergence()
    assert run.diverged and run.ended and not run.finished
    assert record["lr"] == 1e8 and record["step"] >= 1 and "not finite" in record["reason"]
    assert record["wall_time_s"] > 0 and record["cpu_time_s"] > 0  # what the run cost until then
    assert record["fingerprint"] == cfg.fingerprint()  # which config diverged, as a summary says which finished
    metrics = (tmp_path / "run" / METRICS).read_bytes()
    with pytest.raises(DivergedError, match=f"recorded in {DIVERGED}; not trained again"):
        train(cfg, tmp_path / "run", resume=True, quiet=True)
    assert (tmp_path / "run" / METRICS).read_bytes() == metrics and run.read_divergence() == record


def test_train_exits_non_zero_on_divergence(tiny_run, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({**tiny_run, "optim": {"lr": 1e8, "warmup": 0.0}}))
    assert "not finite at step" in one_error_line(cli("train", config, "--out", tmp_path / "run", "--quiet"))


@pytest.mark.parametrize("override, field", [
    ("optim.lr=.inf", "optim.lr: Input should be a finite number"),
    ("steps=1.0e+20", "steps: Value error, must be at most"),
    ("steps=true", "steps: Value error, a boolean is not a number"),
    ("model.d_model=true", "model.d_model: Value error, a boolean is not a number"),
    ("model.options={attention: {n_heads: 0}}", "options.attention.n_heads: Input should be greater than 0"),
    ("model.options={attention: {n_heads: 3}}", "options.attention: n_heads=3 does not divide d_model=16"),
])
def test_config_numbers_that_cannot_be_meant_are_named(tiny_run, tmp_path, override, field):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_run))
    result = cli("train", config, "--set", override, "--out", tmp_path / "run", "--quiet")
    one_error_line(result)
    assert field in result.output and not (tmp_path / "run").exists()


@pytest.mark.parametrize("encoding", ["latin-1", "utf-16"])
def test_a_config_not_in_utf8_is_named(tiny_run, tmp_path, encoding):
    config = tmp_path / "c.yaml"
    config.write_text("# café\n" + yaml.safe_dump(tiny_run), encoding=encoding)
    line = one_error_line(cli("train", config, "--out", tmp_path / "run", "--quiet"))
    assert f"{config}: not UTF-8 text" in line


@pytest.mark.parametrize("source, message", [
    ("import sys\nsys.exit(0)\n", "importing 'exits_at_import' failed: SystemExit: 0"),
    ("raise RuntimeError('no GPU here')\n", "importing 'exits_at_import' failed: RuntimeError: no GPU here"),
])
def test_a_plugin_that_exits_or_raises_at_import_fails_the_sweep_naming_it(tiny_run, tmp_path, monkeypatch, source, message):
    (tmp_path / "exits_at_import.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "exits_at_import", raising=False)
    spec = tmp_path / "sweep.yaml"
    spec.write_text(yaml.safe_dump({"base": tiny_run, "grid": {"model.mixer": ["attention", "exits_at_import:M"]}}))
    result = cli("sweep", spec, "--out", tmp_path / "out")
    assert result.exit_code == 2 and "mixer 'exits_at_import:M'" in result.output and message in result.output, result.output
    assert not (tmp_path / "out" / "runs").exists()
