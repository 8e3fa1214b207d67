"""`run_sweep`: expand a sweep, skip finished runs, and run the rest on an executor.

    SWEEP_DIR/sweep.yaml        the sweep as last run (base resolved)
    SWEEP_DIR/runs/<name>/      one run directory per run (see mecheval.training.run_dir)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import yaml

from mecheval.sweeps.executors import Job, Outcome, run_local, run_ray
from mecheval.sweeps.spec import SweepConfig, expand
from mecheval.training.checkpoint import atomic_write_text
from mecheval.training.run_dir import RunDir

RUNS = "runs"


def run_sweep(
    sweep: SweepConfig,
    out: str | Path,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    on_outcome: Callable[[Outcome], None] = lambda o: None,
) -> list[Outcome]:
    """Runs every unfinished run of `sweep` under `out`; finished runs are skipped (their summary is
    returned as is). Returns one Outcome per run, in the sweep's order.
    """
    out = Path(out)
    runs = expand(sweep)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "sweep.yaml", yaml.safe_dump(sweep.model_dump(mode="json", by_alias=True), sort_keys=False))
    outcomes: dict[str, Outcome] = {}
    jobs = []
    for run in runs:
        run_dir = RunDir(out / RUNS / run.name)
        if run_dir.finished:
            outcomes[run.name] = Outcome(run.name, run_dir.read_summary(), skipped=True)
        else:
            jobs.append(Job(run.name, run.config.model_dump(mode="json"), run_dir.path))
    if jobs:
        if executor == "local":
            stream = run_local(jobs, workers or os.cpu_count() or 1)
        elif executor == "ray":
            stream = run_ray(jobs, address, sweep.max_retries)
        else:
            raise ValueError(f"unknown executor {executor!r}; known: local, ray")
        for outcome in stream:
            outcomes[outcome.name] = outcome
            on_outcome(outcome)
    return [outcomes[r.name] for r in runs]
