"""What a study's training phase shows while its runs train: the study's steps with an ETA, and each running run's
step, polled from the runs' logs."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
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


def steps_done(out: Path, planned: dict[str, int]) -> dict[str, int | None]:
    """name -> the steps each of the study's runs (`planned`: name -> steps) has trained: a finished run (its
    summary written) its planned steps, early stop or not; an unfinished one its last logged step (None: none yet)."""
    def done(name: str, steps: int) -> int | None:
        run = Path(out) / RUNS / name
        if (run / SUMMARY).exists():
            return steps
        step = last_step(run)
        return None if step is None else min(step, steps)

    return {name: done(name, steps) for name, steps in planned.items()}


@contextlib.contextmanager
def training_bars(out: Path, planned: dict[str, int], quiet: bool = False) -> Iterator[Callable[..., None]]:
    """The training phase's progress, polled from the runs' logs every POLL_S: one bar for the study in steps over
    every run (`planned`: name -> steps), so that its rate and ETA count steps, with the runs finished in its
    postfix; and one bar per run training now, at its step. Yields the callback to call once per finished run."""
    finished = [0]
    resumed = sum(s or 0 for s in steps_done(out, planned).values())  # steps a resumed study had trained: not its rate
    with tqdm(total=sum(planned.values()), initial=resumed, desc="train", unit="step", disable=quiet, dynamic_ncols=True) as bar:
        runs: dict[str, tqdm] = {}  # the bars of the runs training now

        def refresh() -> None:
            steps = steps_done(out, planned)
            bar.n = sum(s or 0 for s in steps.values())
            bar.set_postfix_str(f"{finished[0]} of {len(planned)} runs done", refresh=False)
            bar.refresh()
            for name, step in steps.items():
                training = step is not None and step < planned[name]
                if training and name not in runs:
                    runs[name] = tqdm(total=planned[name], initial=step, desc=name, unit="step", leave=False,
                                      position=len(runs) + 1, dynamic_ncols=True)  # its rate counts from here
                if name in runs:
                    runs[name].n = step
                    runs[name].refresh()
                    if not training:
                        runs.pop(name).close()

        def on_finished(*_) -> None:
            finished[0] += 1

        done = threading.Event()

        def poll() -> None:
            while not done.wait(POLL_S):
                refresh()

        thread = threading.Thread(target=poll, daemon=True)
        if not quiet:
            thread.start()
        try:
            yield on_finished
        finally:
            done.set()
            if thread.is_alive():
                thread.join()
                refresh()
            for run in runs.values():
                run.close()
