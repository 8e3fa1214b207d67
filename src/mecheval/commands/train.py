"""`mecheval train [CONFIG.yaml] [--set key=value …] --out RUN_DIR [--resume] [--device …] [--quiet]`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from mecheval.commands.options import example, tracker_option, trackers


def train(
    config: Optional[Path] = typer.Argument(
        None, help="training config (YAML); default: only --set, or the run's own config with --resume", exists=True, dir_okay=False
    ),
    out: Path = typer.Option(..., "--out", help="run directory to write (required)"),
    set_: Optional[list[str]] = typer.Option(None, "--set", help="override a field: a.b=value (YAML value); repeatable"),
    resume: bool = typer.Option(False, "--resume", help="continue the run in --out from its last checkpoint"),
    device: Optional[Literal["cpu", "cuda", "auto"]] = typer.Option(None, "--device", help="overrides the config's device"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    tensorboard: Annotated[bool, tracker_option("tensorboard")] = False,
    wandb: Annotated[bool, tracker_option("wandb")] = False,
) -> None:
    """Train one model and write a run directory (config, metrics, weights, summary).

    Uses 1 or `resources.num_cpus` torch threads (default 1), whichever trains faster (measured).
    """
    from mecheval.commands.flags import in_flags
    from mecheval.training import ConfigError, RunExistsError, load_config
    from mecheval.training import train as run_training
    from mecheval.training.checkpoint import CheckpointError
    from mecheval.training.lock import LockedError
    from mecheval.training.run_dir import CONFIG
    from mecheval.training.threads import use_fastest_threads
    from mecheval.training.trainer import TrainingInterrupted

    sets = list(set_ or [])
    if device is not None:
        sets.append(f"device={device}")
    sets += [f"loggers.{name}=true" for name in trackers(tensorboard=tensorboard, wandb=wandb)]
    try:
        if config is None and resume and (out / CONFIG).exists():
            config = out / CONFIG
        cfg = load_config(config, sets, trained=config == out / CONFIG)
        use_fastest_threads(cfg, max(1, int(cfg.resources.num_cpus)))
        summary = run_training(cfg, out, resume=resume, quiet=quiet)
    except TrainingInterrupted as e:
        typer.echo(f"stopped: {e}; continue it with: mecheval train --out {out} --resume", err=True)
        raise typer.Exit(130) from None
    except (ConfigError, RunExistsError, CheckpointError, LockedError, ImportError, RuntimeError) as e:
        typer.echo(f"error: {in_flags(e, {'`resume=True`': '--resume', '`run_dir`': '--out'})}", err=True)
        raise typer.Exit(2) from None
    accs = "  ".join(f"acc[{split}]={m['acc']:.4f}" for split, m in summary["final"].items())
    typer.echo(f"{out}: {summary['steps']} steps  {accs}  {summary['wall_time_s']:.1f} s  {summary['tokens_per_s']:.0f} tokens/s")


def register(app: typer.Typer) -> None:
    app.command("train", epilog=example(
        "mecheval train examples/train_ar_attention.yaml --out runs/attention",
        "mecheval train examples/train_ar_attention.yaml --set optim.lr=3e-4 --set seed=1 --out runs/attention-s1",
        "mecheval train --out runs/attention --resume",
    ))(train)
