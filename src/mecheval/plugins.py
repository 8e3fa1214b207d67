"""Plug-ins by import path: `"package.module:Name"` names an object any config can refer to.

`model.mixer: mypkg.retnet:RetNet` and `task.name: mypkg.tasks:MyTask` load this way; the zoo is
registered the same way (`mecheval.models.mixers.ZOO`, `mecheval.tasks.registry.ZOO`).
"""

from __future__ import annotations

import importlib
import os
import sys


class PluginError(ValueError):
    """An import path that cannot be loaded, or an object that breaks its contract (one line)."""


def is_import_path(name: str) -> bool:
    """True for `module:attr` (a plug-in), False for a registered short name such as `mamba`."""
    return ":" in name


def load(path: str, what: str) -> object:
    """The object at `path` (`package.module:Attr`, the attribute may be dotted); `what` names the kind
    (e.g. "mixer") in errors. Modules are found on sys.path and, as for `python -m`, in the current
    directory (so `mecheval train` finds `mypkg/` beside the config it is run next to)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f"{what} {path!r}: expected an import path 'package.module:Name'")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise PluginError(f"{what} {path!r}: cannot import {module_name!r} ({e})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginError(f"{what} {path!r}: module {module_name!r} has no {attr!r}") from None
    return obj
