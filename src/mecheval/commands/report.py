"""`mecheval report DIR`: report.md and report.html from a study (or sweep) directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mecheval.commands.options import example


def register(app: typer.Typer) -> None:
    @app.command(epilog=example("mecheval report results/cpu/quick", "mecheval report runs/  (a folder of `mecheval train` runs)"))
    def report(
        path: Annotated[Path, typer.Argument(help="A study or sweep directory.", exists=True, file_okay=False)],
    ) -> None:
        """Write report.md and a self-contained report.html; print the summary table.

        Reads the directory's files only (no plug-in code is imported), under its lock shared with other readers."""
        from mecheval.common import ConfigError
        from mecheval.report import build_report
        from mecheval.report.terminal import print_summary
        from mecheval.training.lock import LockedError

        try:
            result = build_report(path)
        except (FileNotFoundError, ConfigError, LockedError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        print_summary(result)
