"""`DirLock(path)`: one writer at a time in a run, sweep or study directory; readers share it.

The lock is an `flock` on `DIR/.lock`, so the kernel releases it when its holder dies: a lock left by a
killed process is stale by construction and the next process takes it. A writer (`shared=False`: training,
a sweep, `mecheval intervene`) holds it alone and writes its pid, host and start time into the file for
the error another process gets; readers (`shared=True`: `mecheval report`) hold it together, never while
a writer does. `.lock` is never opened through a symbolic link.
"""

from __future__ import annotations

import errno
import functools
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from mecheval.errors import MechevalError

LOCK = ".lock"


class LockedError(MechevalError, RuntimeError):
    """The directory is in use by another process."""


class DirLock:
    """Holds the lock of `path` from `acquire()` (or `with`) until `release()`; `what` names it in errors.
    `shared`: a reader's lock (any number at once, none beside a writer's)."""

    def __init__(self, path: str | Path, what: str = "directory", shared: bool = False) -> None:
        self.path, self.what, self.shared = Path(path), what, shared
        self._fd: int | None = None

    def acquire(self) -> DirLock:
        if not self.shared:
            self.path.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:  # a read-only directory: no writer of ours can be in it, a reader goes on
            if self.shared and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                return self
            raise
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LockedError(f"{self.path}: {self.what} in use by {holder}; wait for it to end") from None
        if not self.shared:
            info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            if not self.shared:
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def run_locked(fn: Callable) -> Callable:
    """`fn(run_dir, ...)` holding the run directory's lock (`DirLock`): one writer of its readouts at a time,
    and no reader (`mecheval report`) while it writes."""

    @functools.wraps(fn)
    def wrapped(run_dir, *args, **kwargs):
        with DirLock(run_dir, "run directory"):
            return fn(run_dir, *args, **kwargs)

    return wrapped


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {info['pid']} on {info['host']} (since {info['since']})"
    except (ValueError, KeyError, TypeError):
        return "another process (a reader, or a writer that has not yet written its pid)"
