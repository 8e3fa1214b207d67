"""Helpers several packages use: atomic file writes, dotted config keys, errors as one line (nothing of
mecheval imported at load)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


N_EXAMPLES = 512  # examples per intervention readout: the API's (`interventions.N_EXAMPLES`), `intervene`'s and `study`'s


class ConfigError(ValueError):
    """A config that cannot be read or validated; the message names the field(s) at fault."""


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yields a temporary path beside `path` to write; then flushes it to disk and renames it over
    `path`. A failed write (a full disk) removes the temporary file and leaves `path` as it was."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Writes `data` to `path` whole or not at all (see `replacing`)."""
    with replacing(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def set_dotted(data: dict, key: str, value: Any) -> None:
    """data[a][b] = value for key "a.b", creating dicts on the way; an error where a non-dict is in the way."""
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(f"bad key {key!r}")
    node = data
    for i, p in enumerate(parts[:-1]):
        child = node.setdefault(p, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {key!r}: {'.'.join(parts[: i + 1])} is {child!r}, not a mapping")
        node = child
    node[parts[-1]] = value


def flatten(d: dict, prefix: str = "") -> dict:
    """The inverse of `set_dotted`: {"a": {"b": 1}} -> {"a.b": 1}; lists (and empty dicts) become JSON strings."""
    out = {}
    for key, value in d.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, (list, tuple, dict)) else value
    return out


def describe(e: BaseException) -> str:
    """The error as one line (our own errors already name the file or field at fault)."""
    from mecheval.training.checkpoint import CheckpointError
    from mecheval.training.lock import LockedError

    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    if isinstance(e, (ConfigError, CheckpointError, LockedError, OSError, ImportError)):
        return str(e)
    return f"{type(e).__name__}: {e}"
