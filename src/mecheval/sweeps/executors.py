"""Executors: run a list of jobs (config, run dir) on local worker processes or as Ray tasks.

Every job trains with resume=True, so a job that was interrupted (a killed worker, a stopped sweep)
continues from its last checkpoint when it runs again.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Job:
    name: str
    config: dict  # a dumped TrainConfig (plain data, cheap to send to a worker)
    run_dir: Path


@dataclass(frozen=True)
class Outcome:
    name: str
    summary: dict | None  # None when the run failed
    error: str | None = None
    skipped: bool = False  # finished before this sweep started


def run_one(config: dict, run_dir: str, threads: int) -> dict:
    """Trains or resumes one run in a worker process with `threads` torch threads; returns its summary."""
    from mecheval.training import TrainConfig, train
    from mecheval.training.threads import use_fastest_threads

    use_fastest_threads(TrainConfig.model_validate(config), threads)  # 1 or `threads`, the faster
    return train(TrainConfig.model_validate(config), run_dir, resume=True, quiet=True)


def run_local(jobs: list[Job], workers: int) -> Iterator[Outcome]:
    """`workers` spawned processes, C // W torch threads at most each; yields outcomes as runs finish."""
    from mecheval.training.threads import threads_per_worker

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(run_one, job.config, str(job.run_dir), threads_per_worker(workers)): job.name for job in jobs}
        for future in as_completed(futures):
            name = futures[future]
            try:
                yield Outcome(name, future.result())
            except Exception as e:  # a failed run is reported; the others go on
                yield Outcome(name, None, _describe(e))


def run_ray(jobs: list[Job], address: str | None, max_retries: int) -> Iterator[Outcome]:
    """One Ray task per run, with the run's `resources` (num_cpus, num_gpus); a task whose worker dies
    is retried up to `max_retries` times and resumes from its checkpoint. Connects to `address` (or
    starts a local instance) unless Ray is already initialised. Run dirs must be on a shared path.
    """
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address=address)
    try:
        task = ray.remote(run_one)
        refs = {}
        for job in jobs:
            res = job.config["resources"]
            opts = {"num_cpus": res["num_cpus"], "num_gpus": res["num_gpus"], "max_retries": max_retries, "name": job.name}
            refs[task.options(**opts).remote(job.config, str(job.run_dir), max(1, int(res["num_cpus"])))] = job.name
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            name = refs[done[0]]
            try:
                yield Outcome(name, ray.get(done[0]))
            except Exception as e:
                yield Outcome(name, None, _describe(e))
    finally:
        if started:
            ray.shutdown()


def _describe(e: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(e), e)).strip()
