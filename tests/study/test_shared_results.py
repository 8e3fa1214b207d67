"""Safe to open anyone's results (issue 38): a results directory redirects no write through a link, runs
no code it names, puts no markup of its files into the report, is not trusted half-written, and its
readers and writers take its locks. Each test works on a copy of the session's tiny study."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.interventions.runs import has_valid_verdict
from mecheval.plugins import TRUST_ENV
from mecheval.study import run_study
from mecheval.training.lock import DirLock

from tests.study.conftest import TINY

EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"


@pytest.fixture
def study(tiny_study, tmp_path) -> Path:
    """A private copy of the tiny study (its runs, verdicts, figures and report)."""
    out = tmp_path / "study"
    shutil.copytree(tiny_study[0], out, symlinks=True)
    return out


def cli(*args) -> "CliRunner.Result":
    return CliRunner().invoke(app, [str(a) for a in args])


def one_error_line(result, code: int | None = None) -> str:
    assert result.exit_code != 0 if code is None else result.exit_code == code, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.startswith(("error:", "skipped"))]
    assert len(lines) >= 1, result.output
    return lines[0]


def a_run(study: Path) -> Path:
    return next(p for p in sorted((study / "runs").iterdir()) if (p / "verdict.json").exists())


# 1. Links in a results directory do not redirect writes


def test_a_symlinked_figures_folder_is_refused_and_its_target_untouched(study, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.png").write_bytes(b"precious")
    shutil.rmtree(study / "figures")
    (study / "figures").symlink_to(elsewhere)
    line = one_error_line(cli("report", study))
    assert "figures" in line and "symbolic link" in line
    assert [p.name for p in elsewhere.iterdir()] == ["keep.png"] and (elsewhere / "keep.png").read_bytes() == b"precious"


def test_a_symlinked_report_is_refused_and_the_file_it_names_untouched(study, tmp_path):
    victim = tmp_path / "victim.html"
    victim.write_text("mine")
    (study / "report.html").unlink()
    (study / "report.html").symlink_to(victim)
    assert "report.html" in one_error_line(cli("report", study))
    assert victim.read_text() == "mine"


def test_intervene_does_not_overwrite_the_file_a_symlinked_table_names(study, tmp_path):
    run = a_run(study)
    victim = tmp_path / "victim.parquet"
    victim.write_bytes(b"not yours")
    (run / "interventions.parquet").unlink()
    (run / "interventions.parquet").symlink_to(victim)
    result = cli("intervene", run, "--n", "16", "--sites", "resid_pre", "--replace")
    assert result.exit_code == 1 and "symbolic link" in result.output, result.output
    assert victim.read_bytes() == b"not yours"


def test_a_symlinked_lock_file_is_not_followed(study, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    run = a_run(study)
    (run / ".lock").unlink(missing_ok=True)
    (run / ".lock").symlink_to(victim)
    assert cli("intervene", run, "--n", "16", "--sites", "resid_pre", "--replace").exit_code == 1
    assert victim.read_text() == "mine"


# 2. Reading results runs no code the directory names


def _plant(study: Path, tmp_path: Path) -> Path:
    """evilpayload.py beside the results, named as a mixer by sweep.yaml and by a run's config; returns the
    file its import would write."""
    marker = tmp_path / "it-ran"
    (study / "evilpayload.py").write_text(EVIL.format(marker=str(marker)))
    spec = yaml.safe_load((study / "sweep.yaml").read_text())
    spec["base"]["model"]["mixer"] = "evilpayload:Evil"
    (study / "sweep.yaml").write_text(yaml.safe_dump(spec))
    config = a_run(study) / "config.yaml"
    cfg = yaml.safe_load(config.read_text())
    cfg["model"]["mixer"] = ["evilpayload:Evil"] * len(cfg["model"]["mixer"])
    config.write_text(yaml.safe_dump(cfg))
    return marker


def test_report_runs_and_archive_logs_in_a_directory_import_nothing_it_names(study, tmp_path, monkeypatch):
    marker = _plant(study, tmp_path)
    # `python -c` puts the current directory on sys.path, as a user running from the results would
    proc = subprocess.run([sys.executable, "-c", "from mecheval.cli import main; main()", "report", "."], cwd=study,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert not marker.exists(), "mecheval report . imported evilpayload.py"
    monkeypatch.chdir(study)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    for args in (["runs", "."], ["archive-logs", "."]):
        assert cli(*args).exit_code == 0
        assert not marker.exists(), f"mecheval {' '.join(args)} imported evilpayload.py"


def test_intervene_imports_a_plugin_from_the_directory_only_with_trust_plugins(study, tmp_path, monkeypatch):
    marker = _plant(study, tmp_path)
    monkeypatch.chdir(study)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    monkeypatch.setenv(TRUST_ENV, "0")
    result = cli("intervene", a_run(study), "--n", "16", "--replace")
    assert result.exit_code != 0 and "--trust-plugins" in result.output and not marker.exists(), result.output
    result = cli("--trust-plugins", "intervene", a_run(study), "--n", "16", "--replace")
    assert marker.exists()  # asked for: imported (then refused as not a Mixer)
    assert "evilpayload:Evil" in result.output and "has no 'Evil'" in result.output


# 3. Markup from result files is escaped in the HTML report


def test_markup_in_study_json_is_escaped_in_report_html(study):
    meta = json.loads((study / "study.json").read_text())
    meta["description"] = "<script>alert(2)</script>"
    meta["preset"] = "<img src=x onerror=alert(3)>"
    (study / "study.json").write_text(json.dumps(meta))
    assert cli("report", study).exit_code == 0
    html = (study / "report.html").read_text()
    assert "<script>alert(2)</script>" not in html and "&lt;script&gt;alert(2)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(3)&gt;" in html


# 4. Half-written readouts are not trusted: the file is named, a study recomputes it


@pytest.mark.parametrize("content, what", [(b"", "not valid JSON"), (b"[]", "expected a JSON object"),
                                           (b'{"verdict": 3}', "field 'verdict' is 3"),
                                           (b'{"verdict": "induction", "detail": "", "effect": "x"}', "field 'effect'")])
def test_an_unreadable_verdict_is_named(study, content, what):
    run = a_run(study)
    (run / "verdict.json").write_bytes(content)
    line = one_error_line(cli("report", study), code=2)
    assert str(run / "verdict.json") in line and what in line
    assert not has_valid_verdict(run)


def test_a_study_recomputes_an_empty_verdict(study):
    run = a_run(study)
    (run / "verdict.json").write_bytes(b"")  # a full disk during the write
    run_study(TINY, study, workers=1, n_examples=64, quiet=True)
    assert has_valid_verdict(run) and json.loads((run / "verdict.json").read_text())["n"] > 0


def test_a_corrupt_study_json_is_named(study):
    (study / "study.json").write_text('{"description": 5}')
    assert "study.json: field 'description' is 5" in one_error_line(cli("report", study), code=2)


# 5. Locks: one writer of a run's readouts; no reader while it writes


def test_intervene_on_a_run_another_process_writes_is_refused(study):
    run = a_run(study)
    before = (run / "verdict.json").read_bytes()
    with DirLock(run, "run directory"):  # another intervene, or the training of the run
        result = cli("intervene", run, "--n", "16", "--sites", "resid_pre", "--replace")
    assert result.exit_code == 1 and "in use by pid" in result.output
    assert (run / "verdict.json").read_bytes() == before


def test_report_while_a_run_is_written_is_refused_with_a_busy_line(study):
    with DirLock(a_run(study), "run directory"):
        line = one_error_line(cli("report", study), code=2)
    assert "run directory in use by pid" in line


def test_report_while_a_sweep_directory_is_intervened_on_is_refused(study):
    with DirLock(study, "sweep directory"):
        assert "in use by pid" in one_error_line(cli("report", study), code=2)


def test_readers_share_the_lock_and_keep_writers_out(study):
    run = a_run(study)
    with DirLock(run, "run directory", shared=True), DirLock(study, "study directory", shared=True):
        assert cli("report", study).exit_code == 0  # another reader: both read
        result = cli("intervene", run, "--n", "16", "--sites", "resid_pre", "--replace")
    assert result.exit_code == 1 and "in use by another process" in result.output
