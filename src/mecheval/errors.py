"""The base of mecheval's errors, and any error as one line (nothing of mecheval imported: every module may
import this one).

Each error mecheval raises on purpose is a `MechevalError` beside the built-in class callers already catch
(`ConfigError` is a ValueError, `CheckpointError` a RuntimeError, …), so `except MechevalError` catches
them all and `except ValueError` still catches what it did. Its message is one line naming the file, field or
model at fault. Interruptions (Ctrl-C, a stopping sweep) are no errors and not among them.
"""

from __future__ import annotations


class MechevalError(Exception):
    """An error mecheval raises on purpose; the message says what is wrong and where, in one line."""


def describe(e: BaseException) -> str:
    """The error as one line: ours and OSError's as their message, any other prefixed by its class."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    if isinstance(e, (MechevalError, OSError, ImportError)):
        return str(e)
    return f"{type(e).__name__}: {e}"
