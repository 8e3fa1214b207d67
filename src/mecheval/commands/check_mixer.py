"""`mecheval check-mixer IMPORT_PATH [--set key=value] [--no-learn]`: the conformance suite of a mixer."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from mecheval.commands.options import example, parse_overrides

STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


def check_mixer(
    mixer: Annotated[str, typer.Argument(help="A zoo name (mamba) or an import path (mypkg.retnet:RetNet).")],
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="A mixer option, key=value (value as YAML), repeatable, e.g. --set n_heads=2.")] = None,
    option: Annotated[Optional[list[str]], typer.Option("--option", "-o", hidden=True, help="Deprecated spelling of --set.")] = None,
    learn: Annotated[bool, typer.Option("--learn/--no-learn", help="Also check that a tiny AR batch is learned (the slowest check).")] = True,
    seed: Annotated[int, typer.Option(help="Seed of the inputs and the parameters.")] = 0,
) -> None:
    """Check a mixer against the contract every zoo mixer passes: causality, recurrent = parallel form,
    gradients to every parameter, sites named and shaped, the conv slot's ablations, a tiny AR batch
    learned. Prints a pass/fail table with the reason for each failure; exits 1 where a check fails."""
    from rich.console import Console
    from rich.table import Table

    from mecheval.models.conformance import check_mixer as run_suite

    if option:
        typer.echo("note: --option/-o is deprecated; use --set key=value", err=True)
    checks = run_suite(mixer, learn=learn, options=parse_overrides([*(option or []), *(set_ or [])]), seed=seed)
    table = Table(title=f"check-mixer {mixer}", min_width=len(mixer) + 16)
    for col in ("check", "result", "reason"):
        table.add_column(col)
    for c in checks:
        table.add_row(c.name, f"[{STYLE[c.status]}]{c.status}[/]", c.reason)
    Console(width=200).print(table)
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        typer.echo(f"{mixer}: {len(failed)} check(s) failed: {', '.join(failed)}", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("check-mixer", epilog=example(
        "mecheval check-mixer mamba", "mecheval check-mixer mypkg.retnet:RetNet --set n_heads=2 --no-learn",
    ))(check_mixer)
