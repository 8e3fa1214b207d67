"""`mecheval sweep SWEEP.yaml --out SWEEP_DIR [--executor local|ray] [--workers N] [--address ADDR] [--cohort K|auto]`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from mecheval.commands.options import cohort_option, cohort_size, example


def sweep(
    spec: Path = typer.Argument(..., help="sweep file (YAML): base, grid and/or list", exists=True, dir_okay=False),
    out: Path = typer.Option(..., "--out", help="sweep directory (runs go to OUT/runs/<name>; required)"),
    executor: Literal["local", "ray"] = typer.Option("local", "--executor", help="where runs train"),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="local worker processes (default: core count)"),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (default: start a local Ray)"),
    new: bool = typer.Option(False, "--new", help="restart afresh the runs in --out made with a different spec (else refused)"),
    cohort: Annotated[Optional[str], cohort_option()] = None,
) -> None:
    """Run every unfinished run of a sweep; finished runs are skipped, interrupted ones resume.

    A run already in --out is skipped or resumed only if its config is the sweep's; Ctrl-C stops
    the sweep (running runs save a checkpoint) and running it again resumes (with or without --cohort).
    """
    from mecheval.commands.flags import COMMON, in_flags
    from mecheval.sweeps import expand, load_sweep, run_sweep
    from mecheval.sweeps.runner import EXECUTORS
    from mecheval.training import ConfigError

    if executor not in EXECUTORS:
        typer.echo(f"error: --executor must be one of {', '.join(EXECUTORS)}, got {executor!r}", err=True)
        raise typer.Exit(2)
    size = cohort_size(cohort)
    try:
        spec_cfg = load_sweep(spec)
        total = len(expand(spec_cfg))
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    count = 0

    def report(outcome) -> None:
        nonlocal count
        count += 1
        if outcome.error:
            typer.echo(f"[{count}] FAILED {outcome.name}: {outcome.error}", err=True)
        else:
            accs = " ".join(f"{s}={m['acc']:.3f}" for s, m in outcome.summary["final"].items())
            typer.echo(f"[{count}] done {outcome.name}: {accs} ({outcome.summary['wall_time_s']:.1f} s)")

    try:
        outcomes = run_sweep(spec_cfg, out, executor, workers, address, on_outcome=report, new=new, cohort=size)
    except ConfigError as e:  # a changed spec, or a model that cannot be built
        typer.echo(f"error: {in_flags(e, COMMON)}", err=True)
        raise typer.Exit(2) from None
    skipped = sum(o.skipped for o in outcomes)
    failed = [o.name for o in outcomes if o.error]
    typer.echo(f"{total} runs: {skipped} already finished, {total - skipped - len(failed)} trained, {len(failed)} failed")
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("sweep", epilog=example(
        "mecheval sweep examples/sweep_ar_mamba_conv.yaml --out sweeps/mamba-conv --workers 2",
        "mecheval sweep examples/sweep_ar_mamba_conv.yaml --out sweeps/mamba-conv --cohort auto",
    ))(sweep)
