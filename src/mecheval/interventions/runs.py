"""Interchange experiments on a trained run directory: tables, heatmaps and the verdict, written beside it.

    RUN_DIR/interventions.parquet        every (corrupt role, layer, site, position) row
    RUN_DIR/interventions/{role}_{site}.png   layer × position heatmaps
    RUN_DIR/verdict.json                 the mechanism verdict (sufficiency runs with resid_pre only)
"""

from __future__ import annotations

import fnmatch
import json
import textwrap
from pathlib import Path

import pandas as pd

from mecheval.interventions.patching import interchange
from mecheval.interventions.plots import heatmap
from mecheval.interventions.verdict import Verdict, mechanism

RUN_MARKERS = ("config.yaml", "model.safetensors")  # files every finished run directory holds


def find_runs(path: Path) -> list[Path]:
    """`path` itself if it is a finished run directory, else every one below it (sorted)."""
    if all((path / f).exists() for f in RUN_MARKERS):
        return [path]
    runs = sorted(p.parent for p in path.rglob(RUN_MARKERS[1]) if (p.parent / RUN_MARKERS[0]).exists())
    if not runs:
        raise FileNotFoundError(f"{path}: neither a finished run directory nor a directory containing any")
    return runs


def present_sites(names: list[str], patterns: list[str]) -> list[str]:
    """The patterns that match at least one site name (a bare kind means `layers.*.kind`)."""
    return [p for p in patterns if fnmatch.filter(names, p if "." in p else f"layers.*.{p}")]


def intervene_run(
    run_dir: Path,
    corrupt: list[str],
    n: int,
    sites: list[str],
    positions: list[str] | None = None,
    seed: int = 0,
    split: str = "test",
    direction: str = "sufficiency",
    min_effect: float = 0.01,
    skip_missing_sites: bool = False,
) -> tuple[pd.DataFrame, Verdict | None]:
    """Runs the interchange experiments of one run and writes its outputs -> (the table, the verdict or None).

    `min_effect` is the verdict's `not learned` filter (the study's: 0.01 on AR, 0.1 on ATR);
    `skip_missing_sites` drops site patterns this model lacks (e.g. `conv_out` without a conv).
    """
    from mecheval import load_run

    run_dir = Path(run_dir)
    lm, task, _ = load_run(run_dir)
    if skip_missing_sites:
        sites = present_sites(list(lm.sites()), sites)
    batch = task.sample(n, seed=seed, split=split)
    df = pd.concat(
        [interchange(lm, task, batch, role, sites, positions, seed=seed, direction=direction) for role in corrupt],
        ignore_index=True,
    )
    df.to_parquet(run_dir / "interventions.parquet", index=False)
    for old in [*(run_dir / "interventions").glob("*.png"), run_dir / "verdict.json"]:  # a previous call's
        old.unlink(missing_ok=True)
    for (role, site), part in df.groupby(["corrupt", "site"], sort=False):
        title = f"{textwrap.fill(run_dir.name, 36)}\ncorrupt {role}, {site}"
        heatmap(part, site, run_dir / "interventions" / f"{role}_{site}.png", title=title)
    readable = direction == "sufficiency" and "resid_pre" in set(df["site"])  # what the verdict reads
    verdict = mechanism(df, corrupt=corrupt[0], min_effect=min_effect) if readable else None
    if verdict is not None:
        (run_dir / "verdict.json").write_text(json.dumps(verdict.as_row(), indent=2) + "\n")
    return df, verdict
