"""`reap_with_me()`: a watchdog process that kills this process's descendants once this process dies,
even by SIGKILL. A locally started Ray's per-node agents (DashboardAgent, RuntimeEnvAgent) otherwise
outlive a killed driver. Linux only (reads /proc); elsewhere it does nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The watchdog: argv = parent pid, then pid:starttime pairs; a pid whose start time changed was reused.
WATCHDOG = """
import os, signal, sys, time
parent, targets = int(sys.argv[1]), [t.split(":") for t in sys.argv[2:]]
while os.getppid() == parent:
    time.sleep(0.5)
for pid, start in targets:
    try:
        if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19] == start:
            os.kill(int(pid), signal.SIGKILL)
    except (OSError, IndexError):
        pass
"""


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of `pid`, None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[19]


def descendants(pid: int) -> dict[int, str]:
    """pid -> start time of every process below `pid`."""
    stats = {int(p.name): _stat(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()}
    children: dict[int, list[int]] = {}
    for child, stat in stats.items():
        if stat is not None:
            children.setdefault(stat[0], []).append(child)
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = stats[child][1]
            todo.append(child)
    return found


def reap_with_me() -> subprocess.Popen | None:
    """Starts the watchdog over this process's current descendants; kill it (`.kill()`) after a
    normal shutdown. None where /proc is missing."""
    if not Path("/proc/self/stat").exists():
        return None
    targets = [f"{pid}:{start}" for pid, start in descendants(os.getpid()).items()]
    return subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), *targets], start_new_session=True)
