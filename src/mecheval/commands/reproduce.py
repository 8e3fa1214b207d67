"""`mecheval reproduce RUN_DIR`: retrain a finished run from its config and check its final weights, bitwise."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mecheval.commands.options import example


def register(app: typer.Typer) -> None:
    @app.command(epilog=example("mecheval reproduce results/cpu/quick-main/runs/preset-attention_lr-0.003_seed-0_steps-3000"))
    def reproduce(
        run_dirs: Annotated[list[Path], typer.Argument(help="Finished run directories.", exists=True, file_okay=False)],
        restore: Annotated[bool, typer.Option("--restore", help="Write the retrained weights into a run committed without them (a run that did not learn), once they match its digest.")] = False,
    ) -> None:
        """Retrain each run in a scratch directory with the threads it trained with and compare the final weights
        with its model.safetensors, tensor by tensor (or with the digest its summary.json keeps); the run's
        directory is only read. Exits 1 where a run does not reproduce."""
        from mecheval.training.reproduce import reproduce as retrain

        failed = 0
        for run_dir in run_dirs:
            try:
                outcome = retrain(run_dir, restore=restore)
            except ValueError as e:
                typer.echo(f"error: {e}", err=True)
                raise typer.Exit(2) from None
            typer.echo(outcome.words())
            failed += not outcome.same
        if failed:
            raise typer.Exit(1)
