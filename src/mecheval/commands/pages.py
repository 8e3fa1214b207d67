"""`mecheval pages [ROOT]`: the README's and the documentation's tables of committed results, regenerated."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mecheval.commands.options import example


def register(app: typer.Typer) -> None:
    @app.command(epilog=example("mecheval pages", "mecheval pages . --check"))
    def pages(
        root: Annotated[Path, typer.Argument(help="The repository (README.md, docs/, results/).", exists=True,
                                             file_okay=False)] = Path("."),
        check: Annotated[bool, typer.Option("--check", help="Change nothing; exit 1 naming the pages that "
                                            "differ from what results/ gives now.")] = False,
    ) -> None:
        """Fill every generated block of README.md and docs/*.md from results/ and draw the study figure."""
        from mecheval.common import ConfigError, UnsafePathError
        from mecheval.report.pages import PageError, stale_pages, write_pages
        from mecheval.training.lock import LockedError

        try:
            changed = stale_pages(root) if check else write_pages(root)
        except (PageError, ConfigError, UnsafePathError, LockedError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        verb = "stale" if check else "written"
        for path in changed:
            typer.echo(f"{verb}: {path}")
        if check and changed:
            typer.echo("run `mecheval pages` to regenerate them", err=True)
            raise typer.Exit(1)
        if not changed:
            typer.echo("every page is up to date")
