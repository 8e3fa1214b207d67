"""The `mecheval` command line: one sub-module of `mecheval.commands` per command group."""

from __future__ import annotations

import importlib
import os

import typer

from mecheval.commands.errors import DEBUG, guard_all
from mecheval.commands.options import example
from mecheval.plugins import TRUST_ENV

_option_type = getattr(typer.core.TyperOption, "display_type_rich", None)  # a typer internal, not in every version


def _flag_type(self, ctx):
    """Help shows no type after a flag (`--quiet`, not `--quiet <bool>`), as ordinary CLIs do."""
    return None if self.is_flag else _option_type(self, ctx)


if _option_type is not None:  # elsewhere typer's help stays as it is
    typer.core.TyperOption.display_type_rich = _flag_type

app = typer.Typer(
    name="mecheval",
    help="Mechanistic evaluation of sequence-model architectures.",
    no_args_is_help=True,
    add_completion=False,
    epilog=example(
        "mecheval study quick --out results/quick   (train, intervene, report; its time: mecheval study --list)",
        "mecheval intervene RUN_DIR --analysis conv-window",
        "mecheval COMMAND --help",
    ),
    pretty_exceptions_enable=False,
)


@app.callback()
def options(
    debug: bool = typer.Option(False, "--debug", help="Show the full traceback of an error."),
    trust_plugins: bool = typer.Option(False, "--trust-plugins", help="Let configs import plug-ins from the current "
                                       "directory (default: installed packages only; see docs/safety.md)."),
) -> None:
    """Mechanistic evaluation of sequence-model architectures."""
    DEBUG["on"] = debug
    if trust_plugins:
        os.environ[TRUST_ENV] = "1"  # inherited by local sweep workers


# Each module defines `register(app)` and adds its commands; listed in the order of the data flow.
COMMAND_MODULES = ["data", "train", "reproduce", "sweep", "runs", "intervene", "study", "relabel", "report",
                   "check_mixer"]

for _name in COMMAND_MODULES:
    importlib.import_module(f"mecheval.commands.{_name}").register(app)
guard_all(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
