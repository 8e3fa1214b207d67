"""The results of a sweep as one table: a row per run, every config field and summary metric a column.

Config fields keep their dotted names (`model.d_model`, `optim.lr`); summary metrics are prefixed
`summary.` (`summary.final.test.acc`). Lists (per-layer fields) are stored as JSON strings. The identity its
sweep recorded in run.json (`store.identity`) is prefixed `run.` (`run.arch`, `run.group`): absent for runs
made without one.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from mecheval.common import flatten
from mecheval.store import identity, runs, studies
from mecheval.store.identity import LR, SEED
from mecheval.sweeps.runner import RUNS, SPEC
from mecheval.sweeps.spec import run_overrides
from mecheval.training.run_dir import CONFIG, RunDir

DIVERGED = "diverged"  # the status of a run that diverged (`RunDir.diverged`)

DEFAULT_METRIC = "summary.final.test.acc"
RECORDED = "run."  # the prefix of the recorded identity's columns
GROUP = RECORDED + "group"


def runs_dir(sweep_dir: str | Path) -> Path:
    """Where a directory's runs are: SWEEP_DIR/runs for a sweep or study, else the directory itself (a folder
    of `mecheval train` run directories)."""
    sweep_dir = Path(sweep_dir)
    return sweep_dir / RUNS if (sweep_dir / RUNS).is_dir() else sweep_dir


def collect(sweep_dir: str | Path, every_run: bool = False) -> pd.DataFrame:
    """One row per run directory under SWEEP_DIR/runs (or, without runs/, directly under SWEEP_DIR: a folder
    of `mecheval train` runs): name, status (done / diverged / unfinished), config, summary (a diverged run's
    record as `diverged.step`, `diverged.reason`, `diverged.last_eval.<split>.acc`, …).
    With a SWEEP_DIR/sweep.yaml, only that sweep's runs (other runs in the directory are not its), unless
    `every_run`."""
    sweep_dir = Path(sweep_dir)
    configs = sorted(runs_dir(sweep_dir).glob(f"*/{CONFIG}"))
    if (sweep_dir / SPEC).exists() and not every_run:
        names = {name for name, _ in run_overrides(studies.spec(sweep_dir / SPEC))}
        configs = [c for c in configs if c.parent.name in names]
    rows = []
    for config in configs:
        run = RunDir(config.parent)
        row = {"name": run.path.name, "status": "done" if run.finished else DIVERGED if run.diverged else "unfinished"}
        row.update(flatten(runs.config(run.path)))
        if run.finished:
            row.update(flatten(runs.summary(run.path), "summary."))
        elif run.diverged:
            row.update(flatten(run.read_divergence(), DIVERGED + "."))
        if (recorded := identity.recorded(run.path)) is not None:
            row.update(flatten(asdict(recorded), RECORDED))
        rows.append(row)
    if not rows:
        raise FileNotFoundError(f"{sweep_dir}: no runs (expected run directories under {RUNS}/ or directly in it)")
    return pd.DataFrame(rows)


def as_text(df: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
    """Values as strings to compare and group on (list-valued fields are JSON strings already); a missing value
    is one string whether None or NaN (tables collected from several studies mix the two)."""
    return df.map(lambda v: "nan" if v is None or (isinstance(v, float) and v != v) else str(v))


def config_columns(df: pd.DataFrame) -> list[str]:
    """The columns of a `collect` table that are config fields (not the run's name, status, summary or recorded
    identity)."""
    return [c for c in df.columns if c not in ("name", "status") and not c.startswith(("summary.", RECORDED, DIVERGED + "."))]


def varying(df: pd.DataFrame) -> list[str]:
    """The config columns whose value differs between runs (what a sweep varied)."""
    return [c for c in config_columns(df) if as_text(df[c]).nunique() > 1]  # missing (a field another kind of run lacks) counts


def best_lr(df: pd.DataFrame, metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """Per comparison group, the finished runs of the learning rate with the highest mean `metric` over seeds
    (the published selection: best learning rate per architecture and width); every seed of that learning
    rate is kept. The rates are compared on the same seeds: those every rate of the group ran, where they share
    one (else on all of each rate's seeds), so that one lucky seed at a rate does not outrank three at another.
    Ties go to the smaller learning rate. The groups are those their sweep recorded (`run.group`)
    where every finished run has one, else (runs made before run.json) the varying config fields other than
    the learning rate and the seed: the same partition. The runs come sorted by those fields.
    """
    done = df[df["status"] == "done"]
    if done.empty:  # none to choose among (every run unfinished or diverged)
        return done.reset_index(drop=True)
    if metric not in done.columns:
        raise KeyError(f"no column {metric!r} among finished runs; metrics: {[c for c in df.columns if c.startswith('summary.')]}")
    keys = [c for c in varying(done) if c not in (LR, SEED)]
    if GROUP in done and done[GROUP].notna().all():
        group = done[GROUP]
    else:
        group = as_text(done[keys]).agg("|".join, axis=1) if keys else pd.Series("", index=done.index)
    picked = set(best_rates(done, group, metric).items())
    best = done.loc[[(g, lr) in picked for g, lr in zip(group, done[LR])]]
    return best.sort_values(keys + ([SEED] if SEED in best else []) or ["name"], kind="stable").reset_index(drop=True)


def best_rates(done: pd.DataFrame, group: pd.Series, metric: str) -> pd.Series:
    """group -> its best learning rate (`best_lr`'s choice): the highest mean `metric` on the seeds every rate of
    the group ran (`_on_shared_seeds`), ties to the smaller rate. done: finished runs; group: [rows] their group."""
    compared = done[_on_shared_seeds(done, group)]
    means = compared.groupby([group[compared.index], compared[LR]])[metric].mean().rename("mean").reset_index()
    means.columns = ["group", LR, "mean"]
    chosen = means.sort_values(["mean", LR], ascending=[False, True], kind="stable").drop_duplicates("group")
    return chosen.set_index("group")[LR]


def _on_shared_seeds(done: pd.DataFrame, group: pd.Series) -> pd.Series:
    """[rows] whether a finished run's seed is one that every learning rate of its group ran (every row of a
    group whose rates share no seed, or of a table without seeds)."""
    if SEED not in done:
        return pd.Series(True, index=done.index)
    seeds = done.groupby([group, done[LR]])[SEED].agg(frozenset)
    shared = seeds.groupby(level=0).agg(lambda sets: frozenset.intersection(*sets))
    keep = pd.Series(True, index=done.index)
    for g, common in shared.items():
        rows = group == g
        if common:
            keep[rows] = done.loc[rows, SEED].isin(common)
    return keep
