"""`mecheval runs SWEEP_DIR [--best-lr]`: a table of a sweep's runs, written to runs.parquet;
`mecheval archive-logs DIR`: the metrics logs of the finished runs under DIR, gzip-compressed for committing."""

from __future__ import annotations

from pathlib import Path

import typer

from mecheval.commands.options import example


def runs(
    sweep_dir: Path = typer.Argument(..., help="a sweep directory", exists=True, file_okay=False),
    best_lr: bool = typer.Option(False, "--best-lr", help="only the best learning rate per group (also best_lr.parquet)"),
    metric: str = typer.Option("summary.final.test.acc", "--metric", help="the column --best-lr maximises"),
) -> None:
    """Print one row per run; write every config field and summary metric to SWEEP_DIR/runs.parquet."""
    from rich.console import Console
    from rich.table import Table

    from mecheval.common import ConfigError, atomic_write_bytes
    from mecheval.plugins import reading_results
    from mecheval.sweeps.spec import short_keys
    from mecheval.sweeps.table import best_lr as select_best
    from mecheval.sweeps.table import collect, varying

    try:
        with reading_results():  # the files only: no plug-in a config names is imported
            df = collect(sweep_dir)
        atomic_write_bytes(sweep_dir / "runs.parquet", df.to_parquet(index=False), sweep_dir)
        shown = df
        if best_lr:
            shown = select_best(df, metric)
            atomic_write_bytes(sweep_dir / "best_lr.parquet", shown.to_parquet(index=False), sweep_dir)
    except (FileNotFoundError, KeyError, ConfigError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    fields = varying(df)
    metrics = [c for c in df.columns if c.startswith("summary.final.") and c.endswith(".acc")]
    cols = ["name", "status", *fields, *metrics, "summary.wall_time_s"]
    headers = {**short_keys(fields), **{m: m.removeprefix("summary.final.") for m in metrics}, "summary.wall_time_s": "wall s"}
    table = Table(title=f"best lr: {len(shown)} of {len(df)} runs" if best_lr else f"{len(df)} runs")
    for c in cols:
        table.add_column(headers.get(c, c), justify="left" if c in ("name", "status") else "right", overflow="fold")
    for _, row in shown.iterrows():
        table.add_row(*(_cell(row.get(c)) for c in cols))
    Console().print(table)


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def archive_logs(
    directory: Path = typer.Argument(..., help="a run, sweep or study directory", exists=True, file_okay=False),
) -> None:
    """Compress metrics.jsonl of every finished run under DIRECTORY to metrics.jsonl.gz (every reader takes
    either; a quarter of the size). Unfinished runs are left as they are: their logs still grow."""
    from mecheval.training.run_dir import CONFIG, RunDir

    archived, unfinished = 0, []
    for config in sorted(directory.rglob(CONFIG)):
        run = RunDir(config.parent)
        try:
            archived += run.archive_metrics()
        except ValueError:  # not finished
            unfinished.append(str(run.path))
    typer.echo(f"archived the logs of {archived} finished run(s) under {directory}")
    for path in unfinished:
        typer.echo(f"left as is (not finished): {path}")


def register(app: typer.Typer) -> None:
    app.command("runs", epilog=example("mecheval runs sweeps/mamba-conv", "mecheval runs sweeps/mamba-conv --best-lr"))(runs)
    app.command("archive-logs", epilog=example("mecheval archive-logs results/cpu/quick"))(archive_logs)
