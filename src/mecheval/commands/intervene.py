"""`mecheval intervene RUN_DIR|SWEEP_DIR`: interchange interventions and mechanism verdicts per run.

Writes into each run directory `interventions.parquet` (all corrupt roles), `verdict.json`, and
`interventions/{corrupt}_{site}.png` (layer × position heatmaps); prints the verdict table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


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
        from mecheval.interventions.runs import find_runs, intervene_run

        if direction not in DIRECTIONS:
            raise typer.BadParameter(f"--direction must be one of {DIRECTIONS}, got {direction!r}")
        try:
            runs = find_runs(path)
        except FileNotFoundError as e:
            raise typer.BadParameter(str(e)) from None
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
