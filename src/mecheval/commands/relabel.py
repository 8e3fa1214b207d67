"""`mecheval relabel STUDY_DIR`: the study's verdicts decided anew by the current rules, its report rebuilt."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mecheval.commands.options import example


def register(app: typer.Typer) -> None:
    @app.command(epilog=example("mecheval relabel results/cpu/quick", "mecheval relabel results/paper-d64/atr-twist --recheck"))
    def relabel(
        path: Annotated[Path, typer.Argument(help="A study directory (with study.json).", exists=True, file_okay=False)],
        repatch: Annotated[bool, typer.Option("--repatch", help="Run every run's interventions again with the current code and the study's settings (loads the weights, trains nothing; seconds per run).")] = False,
        recheck: Annotated[bool, typer.Option("--recheck", help="Load the weights for the controls the tables lack (the pointer control; which test prompts were seen in training), patching again only the runs whose readouts read seen prompts.")] = False,
    ) -> None:
        """Re-decide every run's verdict.json from its committed tables (no training, no patching; with
        --repatch, from tables patched anew) and rebuild the report; prints the summary table. Runs without a per-example table (examples.parquet)
        get one from a forward pass on the study's examples, for like-for-like comparisons."""
        from mecheval.report.terminal import print_summary
        from mecheval.study.run import relabel_study

        if not (path / "study.json").exists():
            typer.echo(f"error: {path} has no study.json: not a study directory", err=True)
            raise typer.Exit(2)
        print_summary(relabel_study(path, repatch, recheck))
