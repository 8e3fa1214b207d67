"""`run_sweep`: expand a sweep, check what is on disk, skip finished runs, and run the rest on an executor.

    SWEEP_DIR/sweep.yaml        the sweep as last run (base resolved); a changed one is kept as sweep.<k>.yaml
    SWEEP_DIR/runs/<name>/      one run directory per run (see mecheval.training.run_dir)
    SWEEP_DIR/runs/<name>/run.json   the run's architecture, variant and comparison group, recorded as it is made
                                (see mecheval.store.identity)
    SWEEP_DIR/.lock             held while a sweep runs here (see mecheval.training.lock)

A run directory is skipped or resumed only if it holds the same run (fingerprint); a sweep whose runs
changed is refused with the fields that differ, unless `new=True` restarts the changed runs afresh.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from mecheval.sweeps.cohorts import describe_cohorts, form_cohorts
from mecheval.sweeps.executors import Job, Outcome, run_local, run_ray
from mecheval.sweeps.preflight import changed_runs, check_models
from mecheval.sweeps.spec import SweepConfig, expand
from mecheval.common import atomic_write_text, dump_yaml, load_yaml
from mecheval.store.identity import record
from mecheval.training.config import ConfigError, flatten, read_yaml
from mecheval.training.lock import DirLock
from mecheval.training.run_dir import RunDir

RUNS = "runs"
SPEC = "sweep.yaml"
EXECUTORS = ("local", "ray")


class SpecChangedError(ConfigError):
    """Run directories hold runs of a different spec than the sweep's."""


class SweepInterrupted(Exception):
    """The sweep was stopped (Ctrl-C); its runs resume when it is run again."""


def run_sweep(
    sweep: SweepConfig,
    out: str | Path,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    on_outcome: Callable[[Outcome], None] = lambda o: None,
    new: bool = False,
    on_note: Callable[[str], None] = lambda text: print(text, file=sys.stderr),
    cohort: int | str | None = None,
) -> list[Outcome]:
    """Runs every unfinished run of `sweep` under `out`; finished runs are skipped (their summary is
    returned as is), and so are runs that diverged (their error is `diverged: <reason>`: `RunDir.diverged`).
    Returns one Outcome per run, in the sweep's order.

    cohort: train runs that differ only in seed, learning rate and weight decay as cohorts of at most this many
    (or "auto": `sweeps.cohorts`), each run in its own directory as alone.

    Raises SpecChangedError when a run directory holds a different run (unless `new`: then it is
    deleted and trained afresh), SweepInterrupted on Ctrl-C, LockedError while another process uses `out`.
    """
    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}; known: {', '.join(EXECUTORS)}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out}: `out` is a file, not a sweep directory")
    runs = expand(sweep)
    check_models(runs)
    with DirLock(out, "sweep directory"):
        changed = changed_runs(runs, out / RUNS)
        if changed and not new:
            raise SpecChangedError(_describe_changes(out, changed))
        for name in changed:
            on_note(f"{name}: restarting afresh (its config changed)")
            with DirLock(out / RUNS / name, "run directory"):
                shutil.rmtree(out / RUNS / name)
        _write_spec(out, sweep, on_note)
        outcomes: dict[str, Outcome] = {}
        jobs = []
        for run in runs:
            run_dir = RunDir(out / RUNS / run.name)
            if run_dir.finished:
                outcomes[run.name] = Outcome(run.name, run_dir.read_summary(), skipped=True)
            elif run_dir.diverged:  # a result: its seed would diverge again (`train` refuses it likewise)
                outcomes[run.name] = Outcome(run.name, None, f"diverged: {run_dir.read_divergence()['reason']}", skipped=True)
            else:
                record(run_dir.path, run.config, out)
                jobs.append(Job(run.name, run.config.model_dump(mode="json"), run_dir.path))
        if jobs:
            workers = workers or os.cpu_count() or 1
            if cohort is not None:
                jobs = form_cohorts(jobs, cohort, workers if executor == "local" else None)
                on_note(describe_cohorts(jobs))
            stream = run_local(jobs, workers) if executor == "local" else run_ray(jobs, address, sweep.max_retries)
            stopped_by = None
            try:
                for outcome in stream:
                    if outcome.interrupted:  # a signal its worker alone got (`kill`, a scheduler's SIGTERM)
                        stopped_by = "a worker was stopped by a signal"
                        break
                    outcomes[outcome.name] = outcome
                    on_outcome(outcome)
            except KeyboardInterrupt:
                stopped_by = "Ctrl-C"
            if stopped_by:
                stream.close()  # stops the other workers (the running runs checkpoint) and cancels the queued runs
                finished = sum(o.error is None for o in outcomes.values())
                raise SweepInterrupted(
                    f"sweep stopped ({stopped_by}): {finished} of {len(runs)} runs finished; the others stopped at a "
                    f"checkpoint or never started; run the same command again to resume"
                ) from None
    return [outcomes[r.name] for r in runs]


def _describe_changes(out: Path, changed: dict[str, list[str]], shown: int = 3) -> str:
    lines = [f"{out}: {len(changed)} run(s) here were made with a different spec; pass `new=True` to restart them "
             f"afresh (their results are deleted), or choose another `out`"]
    for name, diff in list(changed.items())[:shown]:
        lines.append(f"  {name}: " + "; ".join(diff))
    if len(changed) > shown:
        lines.append(f"  … and {len(changed) - shown} more")
    return "\n".join(lines)


def _write_spec(out: Path, sweep: SweepConfig, on_note: Callable[[str], None]) -> None:
    """Writes sweep.yaml; a different one already there is kept as sweep.<k>.yaml, and said so."""
    text = dump_yaml(sweep.model_dump(mode="json", by_alias=True))
    path = out / SPEC
    if path.exists():
        try:
            old = read_yaml(path)
        except ConfigError:
            old = None
        if old == load_yaml(text, str(path)):
            return
        k = 1
        while (out / f"sweep.{k}.yaml").exists():
            k += 1
        path.rename(out / f"sweep.{k}.yaml")
        a, b = flatten(old if isinstance(old, dict) else {}), flatten(load_yaml(text, str(path)))
        diff = [f"{key}: {a.get(key, '(absent)')} -> {b.get(key, '(absent)')}" for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
        on_note(f"{path}: the spec changed ({'; '.join(diff[:5])}{' …' if len(diff) > 5 else ''}); "
                f"the previous one is kept as sweep.{k}.yaml")
    atomic_write_text(path, text, out)
