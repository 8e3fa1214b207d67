"""`mecheval intervene` (not implemented yet)."""

import typer


def register(app: typer.Typer) -> None:
    """Adds nothing until this command is implemented."""
