"""Each file read once per process: `read_once(path, reader)` keeps what `reader(path)` returned, keyed by the
file as it is on disk (inode, size, modification time), so an unchanged file is never read twice and a
rewritten one (every write is an atomic replace: a new inode) is read again. Every caller gets its own copy."""

from __future__ import annotations

import copy
import os
from collections import Counter
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

_KEPT: dict[tuple, tuple[tuple[int, int, int], Any]] = {}
READS: Counter[Path] = Counter()  # path -> how often it was read from disk (what the tests count)


def read_once(path: Path, reader: Callable[..., Any], *args: Hashable) -> Any:
    """`reader(path, *args)`, read from disk only where this process has not read the same file with the same
    reader and arguments; a missing file raises FileNotFoundError, and a reader's error is raised each time
    (nothing is kept)."""
    path = Path(os.path.abspath(path))
    stat = path.stat()
    stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    key = (path, reader, args)
    kept = _KEPT.get(key)
    if kept is None or kept[0] != stamp:
        kept = _KEPT[key] = (stamp, reader(path, *args))
        READS[path] += 1
    return copy.deepcopy(kept[1])


def forget() -> None:
    """Drops every file kept (and the counts of reads)."""
    _KEPT.clear()
    READS.clear()
