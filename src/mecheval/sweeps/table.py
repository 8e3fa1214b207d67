"""The results of a sweep as one table: a row per run, every config field and summary metric a column.

Config fields keep their dotted names (`model.d_model`, `optim.lr`); summary metrics are prefixed
`summary.` (`summary.final.test.acc`). Lists (per-layer fields) are stored as JSON strings.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mecheval.sweeps.runner import RUNS
from mecheval.training.config import flatten
from mecheval.training.run_dir import CONFIG, RunDir

LR = "optim.lr"
DEFAULT_METRIC = "summary.final.test.acc"


def collect(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per run directory under SWEEP_DIR/runs: name, status (done / unfinished), config, summary."""
    rows = []
    for config in sorted((Path(sweep_dir) / RUNS).glob(f"*/{CONFIG}")):
        run = RunDir(config.parent)
        row = {"name": run.path.name, "status": "done" if run.finished else "unfinished"}
        row.update(flatten(run.read_config().model_dump(mode="json")))
        if run.finished:
            row.update(flatten(run.read_summary(), "summary."))
        rows.append(row)
    if not rows:
        raise FileNotFoundError(f"{sweep_dir}: no runs (expected run directories under {RUNS}/)")
    return pd.DataFrame(rows)


def varying(df: pd.DataFrame) -> list[str]:
    """The config columns whose value differs between runs (what a sweep varied)."""
    config_cols = [c for c in df.columns if c not in ("name", "status") and not c.startswith("summary.")]
    return [c for c in config_cols if df[c].astype(str).nunique() > 1]


def best_lr(df: pd.DataFrame, metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """Per group of the varying config fields other than the learning rate, the finished run with the
    highest `metric` (the published selection: best learning rate per architecture and width).
    Ties go to the smaller learning rate.
    """
    done = df[df["status"] == "done"]
    if metric not in done.columns:
        raise KeyError(f"no column {metric!r} among finished runs; metrics: {[c for c in df.columns if c.startswith('summary.')]}")
    keys = [c for c in varying(done) if c != LR]
    ordered = done.sort_values([metric, LR], ascending=[False, True], kind="stable")
    best = ordered.drop_duplicates(subset=keys, keep="first") if keys else ordered.head(1)
    return best.sort_values(keys or ["name"], kind="stable").reset_index(drop=True)
