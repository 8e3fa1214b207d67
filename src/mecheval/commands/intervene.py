"""`mecheval intervene RUN_DIR|SWEEP_DIR`: interchange interventions and mechanism verdicts per run.

Writes into each run directory `interventions.parquet` (all corrupt roles), `verdict.json`, and
`interventions/{corrupt}_{site}.png` (layer × position heatmaps); prints the verdict table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

RUN_MARKERS = ("config.yaml", "model.safetensors")  # files every finished run directory holds


def find_runs(path: Path) -> list[Path]:
    """`path` itself if it is a finished run directory, else every one below it (sorted)."""
    if all((path / f).exists() for f in RUN_MARKERS):
        return [path]
    runs = sorted(p.parent for p in path.rglob(RUN_MARKERS[1]) if (p.parent / RUN_MARKERS[0]).exists())
    if not runs:
        raise typer.BadParameter(f"{path}: neither a finished run directory nor a directory containing any")
    return runs


def intervene_run(run_dir: Path, corrupt: list[str], n: int, sites: list[str], positions: list[str] | None,
                  seed: int, split: str, direction: str):
    """Runs the interchange experiments of one run and writes its outputs -> (the table, the verdict or None)."""
    import pandas as pd

    from mecheval import load_run
    from mecheval.interventions import interchange, mechanism
    from mecheval.interventions.plots import heatmap

    lm, task, _ = load_run(run_dir)
    batch = task.sample(n, seed=seed, split=split)
    df = pd.concat(
        [interchange(lm, task, batch, role, sites, positions, seed=seed, direction=direction) for role in corrupt],
        ignore_index=True,
    )
    df.to_parquet(run_dir / "interventions.parquet", index=False)
    for old in [*(run_dir / "interventions").glob("*.png"), run_dir / "verdict.json"]:  # a previous call's
        old.unlink(missing_ok=True)
    for (role, site), part in df.groupby(["corrupt", "site"], sort=False):
        title = f"{run_dir.name}: corrupt {role}, {site}"
        heatmap(part, site, run_dir / "interventions" / f"{role}_{site}.png", title=title)
    readable = direction == "sufficiency" and "resid_pre" in set(df["site"])  # what the verdict reads
    verdict = mechanism(df, corrupt=corrupt[0]) if readable else None
    if verdict is not None:
        (run_dir / "verdict.json").write_text(json.dumps(verdict.as_row(), indent=2) + "\n")
    return df, verdict


def register(app: typer.Typer) -> None:
    @app.command()
    def intervene(
        path: Annotated[Path, typer.Argument(help="A run directory, or a sweep directory holding runs.", exists=True)],
        corrupt: Annotated[list[str], typer.Option(help="Role(s) to corrupt; the first is the verdict's.")] = ["key"],
        n: Annotated[int, typer.Option(min=1, help="Examples per run.")] = 1024,
        sites: Annotated[list[str], typer.Option(help="Site names or globs, e.g. 'layers.*.resid_pre'.")] = ["*"],
        positions: Annotated[list[str] | None, typer.Option(help="Roles to patch (default: all).")] = None,
        seed: Annotated[int, typer.Option(help="Seed of the examples and corruptions.")] = 0,
        split: Annotated[str, typer.Option(help="Task split of the examples.")] = "test",
        direction: Annotated[str, typer.Option(help="sufficiency | necessity")] = "sufficiency",
    ) -> None:
        """Interchange interventions per run: interventions.parquet, heatmaps, and the mechanism verdicts."""
        from rich.console import Console
        from rich.table import Table
        from tqdm import tqdm

        from mecheval.interventions.metrics import DIRECTIONS

        if direction not in DIRECTIONS:
            raise typer.BadParameter(f"--direction must be one of {DIRECTIONS}, got {direction!r}")
        runs = find_runs(path)
        table = Table(title=f"mechanism: corrupt {corrupt[0]}, residual entering the last layer")
        table.add_column("run", overflow="fold")
        table.add_column("verdict", min_width=len("direct retrieval"))
        for col in ("effect", "layer", "@key", "@value", "@query"):
            table.add_column(col, no_wrap=True)
        for run_dir in tqdm(runs, desc="intervene", unit="run", disable=len(runs) == 1):
            _, v = intervene_run(run_dir, corrupt, n, sites, positions or None, seed, split, direction)
            name = str(run_dir.relative_to(path)) if run_dir != path else run_dir.name
            if v is None:
                table.add_row(name, "-", "", "", "", "", "")
            else:
                table.add_row(name, v.label, f"{v.effect:.3f}", str(v.layer),
                              *(f"{x:.2f}" for x in (v.attrib_key, v.attrib_value, v.attrib_query)))
        Console().print(table)
