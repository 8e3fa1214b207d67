"""The files of a run directory, each read once per process (`files.read_once`) and checked by the reader of the
module that writes it: config.yaml (`RunDir.read_config_data`), summary.json (`RunDir.read_summary`),
verdict.json (`interventions.runs.read_verdict_file`), the metrics log (`RunDir.read_metrics`), the parquet
tables of its readouts (`common.read_table`) and run.json (`store.identity`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mecheval.common import read_table
from mecheval.interventions.runs import VERDICT, read_verdict_file
from mecheval.store.files import read_once
from mecheval.training.run_dir import CONFIG, METRICS, METRICS_ARCHIVE, SUMMARY, RunDir

def _config(path: Path) -> dict:
    return RunDir(path.parent).read_config_data()


def _summary(path: Path) -> dict:
    return RunDir(path.parent).read_summary()


def _verdict(path: Path) -> dict:
    return read_verdict_file(path.parent)


def _metrics(path: Path) -> list[dict]:
    return RunDir(path.parent).read_metrics()


def config(run_dir: Path) -> dict:
    """config.yaml as plain data, importing nothing (`RunDir.read_config_data`)."""
    path = Path(run_dir) / CONFIG
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: not a run directory (no {CONFIG})")
    return read_once(path, _config)


def summary(run_dir: Path) -> dict:
    """summary.json, checked (`RunDir.read_summary`); FileNotFoundError for an unfinished run."""
    return read_once(Path(run_dir) / SUMMARY, _summary)


def verdict(readout_dir: Path) -> dict:
    """The verdict.json of a run's readouts (the run directory, or a split's), checked; {} where there is none."""
    path = Path(readout_dir) / VERDICT
    return read_once(path, _verdict) if path.exists() else {}


def metrics(run_dir: Path) -> list[dict]:
    """The logged records (metrics.jsonl, or its archive); [] where neither is there."""
    run_dir = Path(run_dir)
    path = next((p for p in (run_dir / METRICS, run_dir / METRICS_ARCHIVE) if p.exists()), None)
    return read_once(path, _metrics) if path is not None else []


def table(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """The parquet table at `path` holding `columns` (`common.read_table`)."""
    return read_once(Path(path), read_table, tuple(columns))
