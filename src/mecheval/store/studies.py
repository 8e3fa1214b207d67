"""The files of a study (or sweep) directory read once per process: study.json (`meta`) and sweep.yaml (`spec`);
its run directories (`sweeps.table.collect`) are read through `store.runs`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mecheval.common import read_json_object
from mecheval.store.files import read_once

if TYPE_CHECKING:
    from mecheval.sweeps.spec import SweepConfig

STUDY_JSON = "study.json"  # written by `mecheval study`: preset, scale, findings, timings
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
