"""A study that has not ended is marked (`store.studies.RUNNING`) so that its finished runs can be committed before it
ends and nothing reads it as a result until then."""

import json

import pytest

import mecheval.study.run as study_run
from mecheval.store import studies
from mecheval.study import run_study
from pages.base import studies as page_studies
from tests.study.conftest import TINY


def test_a_study_stopped_partway_keeps_its_marker_and_writes_no_study_json(tmp_path, monkeypatch):
    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(study_run, "run_sweep", killed)
    with pytest.raises(KeyboardInterrupt):
        run_study(TINY, tmp_path / "study", workers=1, quiet=True)
    assert studies.running(tmp_path / "study") and not (tmp_path / "study" / studies.STUDY_JSON).exists()
    marker = json.loads((tmp_path / "study" / studies.RUNNING).read_text())
    assert (marker["preset"], marker["scale"]) == (TINY.name, "cpu") and marker["started"].endswith("Z")


def test_the_pages_leave_out_a_study_that_has_not_ended(tmp_path):
    for name in ("ended", "running"):
        (tmp_path / "results" / "cpu" / name / "runs").mkdir(parents=True)
    (tmp_path / "results" / "cpu" / "running" / studies.RUNNING).write_text("{}\n")
    assert [str(p) for p in page_studies(tmp_path)] == ["results/cpu/ended"]
