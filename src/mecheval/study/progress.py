"""What a study's training phase shows while its runs train: each unfinished run's step, polled from its log."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from mecheval.sweeps.runner import RUNS
from mecheval.training.run_dir import METRICS, SUMMARY

POLL_S = 2.0  # seconds between two looks at the runs' logs
TAIL = 4096  # bytes read from the end of a log: enough for its last record


def last_step(run_dir: Path) -> int | None:
    """The step of the last whole record of RUN_DIR/metrics.jsonl; None where there is none yet."""
    path = run_dir / METRICS
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - TAIL))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def training_now(out: Path) -> str:
    """`name step N, …` for every run under OUT/runs that has logged a step and has no summary yet."""
    runs = sorted(p for p in (Path(out) / RUNS).glob("*") if p.is_dir() and not (p / SUMMARY).exists())
    steps = [(p.name, last_step(p)) for p in runs]
    return ", ".join(f"{name} step {step:,}" for name, step in steps if step is not None)


@contextlib.contextmanager
def showing_steps(bar: tqdm, out: Path) -> Iterator[None]:
    """While the block runs, the bar's postfix names the step each unfinished run of `out` has reached."""
    done = threading.Event()

    def poll() -> None:
        while not done.wait(POLL_S):
            bar.set_postfix_str(training_now(out), refresh=True)

    thread = threading.Thread(target=poll, daemon=True)
    if not bar.disable:
        thread.start()
    try:
        yield
    finally:
        done.set()
        if thread.is_alive():
            thread.join()
