"""Plug-ins by import path: `"package.module:Name"` names an object any config can refer to.

`model.mixer: mypkg.retnet:RetNet` and `task.name: mypkg.tasks:MyTask` load this way; the zoo is
registered the same way (`mecheval.models.mixers.ZOO`, `mecheval.tasks.registry.ZOO`).

What is imported (docs/safety.md): modules found on `sys.path` (installed packages, `PYTHONPATH`); the
current directory only when the user trusts it (`mecheval --trust-plugins …`, which sets TRUST_ENV, so
that local sweep workers trust it too). Readers of results (`reading_results`) import no plug-in at all.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator

from mecheval.errors import MechevalError

TRUST_ENV = "MECHEVAL_TRUST_PLUGINS"  # "1": plug-ins may be imported from the current directory
_READING = {"depth": 0}  # > 0 inside `reading_results`


class PluginError(MechevalError, ValueError):
    """An import path that cannot be loaded, or an object that breaks its contract (one line)."""


def is_import_path(name: str) -> bool:
    """True for `module:attr` (a plug-in), False for a registered short name such as `mamba`."""
    return ":" in name


def trusted() -> bool:
    """Whether the user allowed plug-ins from the current directory (`--trust-plugins`)."""
    return os.environ.get(TRUST_ENV) == "1"


@contextlib.contextmanager
def reading_results() -> Iterator[None]:
    """Within: `load` imports nothing outside mecheval, so reading or reporting a results directory never
    runs code that it (or the current directory) names."""
    _READING["depth"] += 1
    try:
        yield
    finally:
        _READING["depth"] -= 1


@contextlib.contextmanager
def _search_path() -> Iterator[None]:
    """sys.path for a plug-in import: where trusted, the current directory added (and kept, as `python -m`
    does); else without the implicit current directory ('', as `python -c` puts it there)."""
    if trusted():
        if os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        yield
        return
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    try:
        yield
    finally:
        sys.path[:] = saved


def load(path: str, what: str) -> object:
    """The object at `path` (`package.module:Attr`, the attribute may be dotted); `what` names the kind
    (e.g. "mixer") in errors. A module that fails to import (raises, or calls sys.exit) is a PluginError
    naming the import path."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f"{what} {path!r}: expected an import path 'package.module:Name'")
    if _READING["depth"] and module_name.split(".")[0] != "mecheval":
        raise PluginError(f"{what} {path!r}: not imported while reading results (reading never runs code)")
    try:
        with _search_path():
            obj = importlib.import_module(module_name)
    except ImportError as e:
        hint = "" if trusted() else "; to import it from the current directory, run `mecheval --trust-plugins …`"
        raise PluginError(f"{what} {path!r}: cannot import {module_name!r} ({e}){hint}") from None
    except (Exception, SystemExit) as e:  # the module's own code failed, or exited
        raise PluginError(f"{what} {path!r}: importing {module_name!r} failed: {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginError(f"{what} {path!r}: module {module_name!r} has no {attr!r}") from None
    return obj
