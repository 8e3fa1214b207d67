"""Conventions every command shares: list options, `--set key=value` overrides, examples in `--help`.

List options take values comma-separated, repeated, or both: `--sites resid_pre,conv_out` is
`--sites resid_pre --sites conv_out`. Overrides are `--set key=value` everywhere, the value read as YAML
(`--set n_pairs=8`, `--set optim.lr=3e-4`, `--set dims=[1,2]`).
"""

from __future__ import annotations

import typer

from mecheval.common import ConfigError, load_yaml


def split_list(values: list[str] | None) -> list[str] | None:
    """Repeated and comma-separated values, flattened in order; None stays None."""
    if values is None:
        return None
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def parse_overrides(items: list[str] | None, flag: str = "--set") -> dict:
    """["a.b=3e-4", "name=x"] -> {"a.b": 0.0003, "name": "x"} (values as YAML); BadParameter naming the item."""
    out = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint=flag)
        try:
            out[key.strip()] = load_yaml(text, repr(item)) if text.strip() else ""
        except ConfigError as e:
            raise typer.BadParameter(str(e), param_hint=flag) from None
    return out


def example(*lines: str) -> str:
    """An `--help` epilog showing how a command is called."""
    return "Examples:\n\n" + "\n\n".join(f"  {line}" for line in lines)


TRACKERS = {  # the experiment trackers a run can log to (TrainConfig.loggers) -> their flag's help
    "tensorboard": "Also log each run to TensorBoard (RUN_DIR/tensorboard; needs mecheval[loggers]).",
    "wandb": "Also log each run to Weights & Biases (project loggers.wandb_project; needs mecheval[loggers]).",
}


def tracker_option(name: str):
    """`--tensorboard` / `--wandb`, the same flag on `train` and `study`."""
    return typer.Option(f"--{name}", help=TRACKERS[name])


def trackers(**flags: bool) -> list[str]:
    """The trackers switched on: `trackers(tensorboard=True, wandb=False)` -> ["tensorboard"]."""
    return [name for name in TRACKERS if flags[name]]


def cohort_option():
    """`--cohort K|auto`, the same flag on `sweep` and `study`."""
    return typer.Option(
        "--cohort", metavar="K|auto",
        help="Train the runs that differ only in seed, learning rate and weight decay as cohorts of at most K runs "
             "(one job each; every run in the directory it would have alone), or auto: as many as fit in memory.",
    )


def cohort_size(text: str | None) -> int | str | None:
    """`--cohort`'s value: a size, "auto" or None; BadParameter otherwise."""
    from mecheval.sweeps.cohorts import parse_cohort

    try:
        return parse_cohort(text)
    except ConfigError as e:
        raise typer.BadParameter(str(e), param_hint="--cohort") from None
