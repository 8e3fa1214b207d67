"""`DirLock(path)`: one process at a time in a run or sweep directory.

The lock is an `flock` on `DIR/.lock`, so the kernel releases it when its holder dies: a lock left by a
killed process is stale by construction and the next process takes it. The file names the holder
(pid, host, start time) for the error another process gets.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

LOCK = ".lock"


class LockedError(RuntimeError):
    """The directory is in use by another process."""


class DirLock:
    """Holds the lock of `path` from `acquire()` (or `with`) until `release()`; `what` names it in errors."""

    def __init__(self, path: str | Path, what: str = "directory") -> None:
        self.path, self.what = Path(path), what
        self._fd: int | None = None

    def acquire(self) -> DirLock:
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LockedError(f"{self.path}: {self.what} in use by {holder}; wait for it to end") from None
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {info['pid']} on {info['host']} (since {info['since']})"
    except (ValueError, KeyError, TypeError):
        return "another process (it has not yet written its pid)"
