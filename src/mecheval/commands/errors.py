"""Every command's errors as one clear line on stderr and a non-zero exit, never a traceback
(`mecheval --debug …` shows it), the library's Python arguments named by their flags (`flags.COMMON`).
Ctrl-C exits 130 with what was stopped and how to resume."""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable

import typer

from mecheval.commands.flags import COMMON, in_flags
from mecheval.errors import describe

DEBUG = {"on": False}  # set by `mecheval --debug`
INTERRUPTED = 130  # the shell's code for a process stopped by SIGINT
# The CLI framework's own errors pass through; typer raises click's (older typer) or its vendored copy's.
CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
PASS_THROUGH = (CLICK_ERROR, typer.Exit, typer.Abort)


def guard(command: Callable) -> Callable:
    """Wraps a command: click's own errors pass; anything else becomes `error: …` and exit 1 (130 on Ctrl-C)."""

    @functools.wraps(command)
    def wrapped(*args, **kwargs):
        from mecheval.sweeps.runner import SweepInterrupted
        from mecheval.training.trainer import TrainingInterrupted

        try:
            return command(*args, **kwargs)
        except PASS_THROUGH:
            raise
        except (SweepInterrupted, TrainingInterrupted, KeyboardInterrupt) as e:
            typer.echo(f"stopped: {e}" if str(e) else "stopped (Ctrl-C)", err=True)
            raise typer.Exit(INTERRUPTED) from None
        except Exception as e:
            if DEBUG["on"]:
                traceback.print_exc()
            hint = "" if DEBUG["on"] else "  (mecheval --debug … shows the traceback)"
            typer.echo(f"error: {in_flags(describe(e), COMMON)}{hint}", err=True)
            raise typer.Exit(1) from None

    return wrapped


def guard_all(app: typer.Typer) -> None:
    """Applies `guard` to every command of `app` and of its sub-apps."""
    for command in app.registered_commands:
        command.callback = guard(command.callback)
    for group in app.registered_groups:
        guard_all(group.typer_instance)
