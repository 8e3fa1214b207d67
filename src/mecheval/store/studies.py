"""The files of a study (or sweep) directory read once per process: study.json (`meta`) and sweep.yaml (`spec`);
its run directories (`sweeps.table.collect`) are read through `store.runs`. `running`: a study that has not ended."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mecheval.common import read_json_object
from mecheval.store.files import read_once

if TYPE_CHECKING:
    from mecheval.sweeps.spec import SweepConfig

STUDY_JSON = "study.json"  # written by `mecheval study`: preset, scale, findings, timings
# written by `mecheval study` when it starts, removed when it ends: a study stopped partway keeps it, so that its
# finished runs can be committed (nothing lost with the machine) while nothing reads the study as a result
RUNNING = "study.running.json"
STRINGS = ("description", "preset", "scale", "cpu_drops")


def _meta(path: Path) -> dict:
    return read_json_object(path, {}, optional={**{k: str for k in STRINGS}, "wall_time_s": (int, float),
                                                "findings": list, "n_examples": int, "archs": (list, type(None))})


def meta(study_dir: Path) -> dict:
    """study.json, its fields of their types where present; {} where absent; ConfigError naming the file otherwise."""
    path = Path(study_dir) / STUDY_JSON
    return read_once(path, _meta) if path.exists() else {}


def spec(path: Path) -> SweepConfig:
    """The sweep file at `path` (a study's sweep.yaml), validated, its base resolved (`sweeps.spec.load_sweep`)."""
    from mecheval.sweeps.spec import load_sweep  # at call time: the sweeps package imports the store

    return read_once(Path(path), load_sweep)


def running(study_dir: Path) -> bool:
    """Has the study in `study_dir` started and not ended (its RUNNING marker present)?"""
    return (Path(study_dir) / RUNNING).exists()
