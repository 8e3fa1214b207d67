"""A finished run's log compressed for committing (`RunDir.archive_metrics`, `mecheval archive-logs`) reads
back as the same records, and nothing is archived that could still grow or be lost."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.training import ConfigError, RunExistsError, train
from mecheval.training.run_dir import METRICS, METRICS_ARCHIVE, SUMMARY, RunDir


def test_archived_log_reads_as_the_plain_one_and_a_finished_run_still_resumes(tmp_path, tiny_config):
    cfg = tiny_config()
    summary = train(cfg, tmp_path / "run", quiet=True)
    run = RunDir(tmp_path / "run")
    plain = (run / METRICS).read_bytes()
    records = run.read_metrics()
    assert run.archive_metrics()
    assert not (run / METRICS).exists() and gzip.decompress((run / METRICS_ARCHIVE).read_bytes()) == plain
    assert run.read_metrics() == records and run.read_metrics(max_step=12) == [r for r in records if r["step"] <= 12]
    assert not run.archive_metrics()  # nothing left to archive
    assert train(cfg, run.path, resume=True, quiet=True) == summary  # the finished run is read, not retrained


def test_unfinished_run_is_not_archived(tmp_path, tiny_config):
    train(tiny_config(), tmp_path / "run", quiet=True)
    run = RunDir(tmp_path / "run")
    (run / SUMMARY).unlink()  # as if killed before the end: its log would still grow
    with pytest.raises(ValueError, match="not finished"):
        run.archive_metrics()
    assert (run / METRICS).exists() and not (run / METRICS_ARCHIVE).exists()


def test_corrupt_archive_is_one_clear_error(tmp_path, tiny_config):
    train(tiny_config(), tmp_path / "run", quiet=True)
    run = RunDir(tmp_path / "run")
    run.archive_metrics()
    (run / METRICS_ARCHIVE).write_bytes(b"not gzip")
    with pytest.raises(ConfigError, match="unreadable"):
        run.read_metrics()


def test_archive_in_a_directory_without_config_is_foreign(tmp_path, tiny_config):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / METRICS_ARCHIVE).write_bytes(gzip.compress(json.dumps({"step": 1}).encode()))
    with pytest.raises(RunExistsError, match="not a mecheval run"):
        train(tiny_config(), tmp_path / "x", quiet=True)


def test_cli_archives_finished_runs_and_names_the_rest(tmp_path, tiny_config):
    for name in ("a", "b"):
        train(tiny_config(), tmp_path / "sweep" / name, quiet=True)
    (tmp_path / "sweep" / "b" / SUMMARY).unlink()
    out = CliRunner().invoke(app, ["archive-logs", str(tmp_path / "sweep")])
    assert out.exit_code == 0, out.output
    assert "archived the logs of 1 finished run(s)" in out.output and "not finished" in out.output
    assert (tmp_path / "sweep" / "a" / METRICS_ARCHIVE).exists() and (tmp_path / "sweep" / "b" / METRICS).exists()
