"""Someone's results directory read safely (issue 56): a YAML alias bomb in a run's config.yaml, tables and
JSON files of the wrong shape are one line naming the file, exit 2, and come at once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.study.test_shared_results import a_run, cli, one_error_line
from tests.test_untrusted_input import BOMB, in_a_process


@pytest.fixture
def study(tiny_study, tmp_path) -> Path:
    """A private copy of the tiny study."""
    out = tmp_path / "study"
    shutil.copytree(tiny_study[0], out, symlinks=True)
    return out


@pytest.mark.parametrize("command", ["report", "runs"])
def test_an_alias_bomb_in_a_runs_config_fails_at_once_naming_it(study, command):
    config = a_run(study) / "config.yaml"
    config.write_text(config.read_text() + BOMB)
    result = in_a_process(command, study)
    assert result.returncode == 2, result.stderr
    assert f"error: {config}: line " in result.stderr and "aliases are refused" in result.stderr


def _json(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _table(path: Path) -> None:
    pd.DataFrame({"x": [1]}).to_parquet(path)


@pytest.mark.parametrize("file, spoil, says", [
    ("examples.parquet", _table, "lacks the columns id, correct, outside"),
    ("accuracy.parquet", _table, "lacks the columns subset, acc"),
    ("timeline.parquet", _table, "lacks the columns step, verdict"),
    ("accuracy.parquet", lambda p: p.write_bytes(b"not parquet"), "not a readable parquet table"),
    ("summary.json", lambda p: _json(p, final={"test": 5}), "field 'final.test' holds 5"),
    ("verdict.json", lambda p: _json(p, n_all="x"), "field 'n_all' is 'x', expected int or float"),
])
def test_a_runs_file_of_the_wrong_shape_is_named_by_report(study, file, spoil, says):
    for run in sorted((study / "runs").iterdir()):  # every run: whichever the report reads first
        spoil(run / file)
    line = one_error_line(cli("report", study), code=2)
    assert "/runs/" in line and f"/{file}: {says}" in line, line


@pytest.mark.parametrize("fields, says", [({"findings": "abc"}, "field 'findings' is 'abc', expected list"),
                                          ({"findings": ["bogus"]}, "unknown findings ['bogus']")])
def test_a_malformed_study_json_is_named_by_report(study, fields, says):
    _json(study / "study.json", **fields)
    assert f"{study / 'study.json'}: {says}" in one_error_line(cli("report", study), code=2)


def test_a_malformed_summary_is_named_by_runs(study):
    run = a_run(study)
    _json(run / "summary.json", final=5)
    line = one_error_line(cli("runs", study), code=2)
    assert f"{run / 'summary.json'}: field 'final' is 5" in line


def _read_on_fewer_examples(run: Path, n: int) -> None:
    """`run`'s readouts as a study call with `--n n` leaves them (one killed, then run again with another --n)."""
    examples = pd.read_parquet(run / "examples.parquet")
    examples.iloc[:n].to_parquet(run / "examples.parquet")
    _json(run / "verdict.json", n_all=n)


def test_runs_read_with_another_n_are_named_with_the_fix(study):
    runs = sorted((study / "runs").iterdir())
    attention = next(r for r in runs if "attention" in r.name and r.name.endswith("0.003"))
    _read_on_fewer_examples(attention, 32)
    line = one_error_line(cli("report", study), code=2)
    assert str(attention) in line and "(32 examples)" in line and "(64 examples)" in line
    assert "--n N" in line


def test_a_study_rereads_the_runs_an_earlier_call_read_with_another_n(study):
    from mecheval.study import run_study
    from tests.study.conftest import TINY

    attention = next(r for r in sorted((study / "runs").iterdir()) if "attention" in r.name)
    _read_on_fewer_examples(attention, 32)
    run_study(TINY, study, workers=1, n_examples=64, quiet=True)
    assert json.loads((attention / "verdict.json").read_text())["n_all"] == 64
    assert len(pd.read_parquet(attention / "examples.parquet")) == 64
