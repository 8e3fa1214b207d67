"""The command line's words for the fix an error names. The library's errors name Python arguments, written
between backticks (`resume=True`, `out`); a command that shows such an error names its own flags instead."""

from __future__ import annotations


def in_flags(error: Exception | str, flags: dict[str, str]) -> str:
    """The error's message with each `python argument` of `flags` (backticks included) replaced by its flag,
    e.g. {"`resume=True`": "--resume", "`run_dir`": "--out"}."""
    message = str(error)
    for python, flag in flags.items():
        message = message.replace(python, flag)
    return message


# the Python arguments every command names by the same flag (a command maps its own others, e.g. `run_dir`)
COMMON = {"`new=True`": "--new", "`resume=True`": "--resume", "`replace=True`": "--replace", "`out`": "--out"}
