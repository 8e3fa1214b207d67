"""Executors: run a list of jobs (config, run dir) on local worker processes or as Ray tasks.

Every job trains with resume=True, so a job that was interrupted (a killed worker, a stopped sweep)
continues from its last checkpoint when it runs again. A failed job's traceback goes to its run's
error.log. Ctrl-C (KeyboardInterrupt in the caller) stops the whole sweep: running runs checkpoint
and stop, queued runs never start. Local workers also stop when their parent dies (even by SIGKILL).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from mecheval.common import check_inside
from mecheval.errors import MechevalError

ERROR_LOG = "error.log"
THREADS_ENV = "MECHEVAL_THREADS"  # caps each local worker's torch threads; 1 makes runs match one-thread runs bit for bit


@dataclass(frozen=True)
class Job:
    name: str
    config: dict  # a dumped TrainConfig (plain data, cheap to send to a worker)
    run_dir: Path


@dataclass(frozen=True)
class CohortJob:
    """Runs trained as one cohort (`training.cohort`), each into its own run directory."""

    members: tuple[Job, ...]

    @property
    def name(self) -> str:
        return f"cohort of {len(self.members)} ({self.members[0].name}, …)"


@dataclass(frozen=True)
class Outcome:
    name: str
    summary: dict | None  # None when the run failed
    error: str | None = None
    skipped: bool = False  # finished before this sweep started
    interrupted: bool = False  # stopped by a signal to its worker (checkpointed), or not started as the worker stopped


class RunFailed(MechevalError, RuntimeError):
    """A run raised; the message is its last line and where its traceback was written."""


_busy = threading.Event()  # a worker is inside run_one


def run_one(config: dict, run_dir: str, threads: int) -> dict:
    """Trains or resumes one run in a worker process with `threads` torch threads; returns its summary.
    A failure appends its traceback to RUN_DIR/error.log and raises RunFailed naming it."""
    from mecheval.training import TrainConfig, train
    from mecheval.training.threads import use_fastest_threads
    from mecheval.training.trainer import STOP, TrainingInterrupted

    _busy.set()
    try:
        if STOP.is_set():
            raise TrainingInterrupted(f"{run_dir}: not started (the sweep is stopping)")
        use_fastest_threads(TrainConfig.model_validate(config), threads)  # 1 or `threads`, the faster
        return train(TrainConfig.model_validate(config), run_dir, resume=True, quiet=True)
    except TrainingInterrupted:
        raise
    except Exception as e:
        raise RunFailed(_log_failure(run_dir, e)) from None
    finally:
        _busy.clear()


def run_cohort(configs: list[dict], run_dirs: list[str], threads: int) -> list[dict | str]:
    """`run_one` for a cohort (`training.cohort.train_cohort`, resumed, engine auto): per member its summary, or
    its error line (its traceback appended to its error.log). A failure of the whole cohort raises RunFailed
    (its traceback in every member's error.log)."""
    from mecheval.training import TrainConfig
    from mecheval.training.cohort import train_cohort
    from mecheval.training.threads import use_fastest_threads
    from mecheval.training.trainer import STOP, TrainingInterrupted

    _busy.set()
    try:
        if STOP.is_set():
            raise TrainingInterrupted(f"{run_dirs[0]} …: not started (the sweep is stopping)")
        members = [(TrainConfig.model_validate(c), d) for c, d in zip(configs, run_dirs)]
        use_fastest_threads(members[0][0], threads)
        results = train_cohort(members, resume=True, quiet=True)
    except TrainingInterrupted:
        raise
    except Exception as e:
        logged = [_log_failure(d, e) for d in run_dirs]  # into every member's error.log
        raise RunFailed(logged[0]) from None
    finally:
        _busy.clear()
    return [_log_failure(d, r) if isinstance(r, Exception) else r for d, r in zip(run_dirs, results)]


def _log_failure(run_dir: str, e: BaseException) -> str:
    """Appends the traceback of `e` to RUN_DIR/error.log; returns its one-line description and where it went."""
    log = Path(run_dir) / ERROR_LOG
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(check_inside(log), "a") as f:  # not through a link
            f.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()} on {socket.gethostname()}\n")
            f.write("".join(traceback.format_exception(e)))
        where = f" (traceback in {log})"
    except OSError:
        where = ""
    return _describe(e) + where


def submit(job: Job | CohortJob, threads: int) -> tuple:
    """(worker function, *its arguments) that train `job`: `run_one` for a run, `run_cohort` for a cohort."""
    if isinstance(job, CohortJob):
        return run_cohort, [m.config for m in job.members], [str(m.run_dir) for m in job.members], threads
    return run_one, job.config, str(job.run_dir), threads


def outcomes(job: Job | CohortJob, result: dict | list | None, error: Exception | None = None) -> list[Outcome]:
    """The outcome of each run of `job` from what its worker function returned (or the error it raised)."""
    from mecheval.training.trainer import TrainingInterrupted

    members = job.members if isinstance(job, CohortJob) else (job,)
    if error is not None:
        return [Outcome(m.name, None, _describe(error), interrupted=isinstance(error, TrainingInterrupted)) for m in members]
    results = result if isinstance(job, CohortJob) else [result]
    return [Outcome(m.name, r, None) if isinstance(r, dict) else Outcome(m.name, None, r) for m, r in zip(members, results)]


def run_on_ray(fn, *args):
    """`fn(*args)` (`run_one`, `run_cohort`) as a Ray task. Ray reuses a worker for later tasks, so each starts
    with the stop flag clear (a SIGTERM to an earlier task set it); a task stopped by a signal raises
    TrainingInterrupted after its checkpoint, which `run_ray` has Ray retry like a crashed worker."""
    from mecheval.training.trainer import STOP

    STOP.clear()
    return fn(*args)


def run_one_ray(config: dict, run_dir: str, threads: int) -> dict:
    """`run_one` as a Ray task (`run_on_ray`)."""
    return run_on_ray(run_one, config, run_dir, threads)


def _init_worker(parent: int) -> None:
    """In each local worker: Ctrl-C requests a stop (the run checkpoints), and a watchdog stops the
    worker once its parent is gone."""
    from mecheval.training.trainer import request_stop

    signal.signal(signal.SIGINT, request_stop)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int, poll_s: float = 0.5) -> None:
    from mecheval.training.trainer import request_stop

    while os.getppid() == parent:
        time.sleep(poll_s)
    request_stop()
    while _busy.is_set():  # the running run checkpoints and stops within a step
        time.sleep(0.1)
    os._exit(1)


def run_local(jobs: list[Job | CohortJob], workers: int) -> Iterator[Outcome]:
    """`workers` spawned processes, C // W torch threads at most each ($MECHEVAL_THREADS at most
    where set); yields outcomes as runs finish (a cohort's all at once). On KeyboardInterrupt the queued runs
    are cancelled and the running ones stop at a checkpoint."""
    from mecheval.training.threads import threads_per_worker

    threads = int(os.environ.get(THREADS_ENV) or threads_per_worker(workers))
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(os.getpid(),))
    try:
        futures = {pool.submit(*submit(job, threads)): job for job in jobs}
        for future in as_completed(futures):
            job = futures[future]
            try:
                result = future.result()
            except Exception as e:  # a failed run is reported; the others go on
                yield from outcomes(job, None, e)
            else:
                yield from outcomes(job, result)
    except BaseException:
        for process in list(getattr(pool, "_processes", {}).values()):  # also when only we got the signal
            if process.is_alive():
                os.kill(process.pid, signal.SIGINT)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def run_ray(jobs: list[Job | CohortJob], address: str | None, max_retries: int) -> Iterator[Outcome]:
    """One Ray task per run or cohort, with the run's (a cohort: its members') `resources` (num_cpus, num_gpus: a
    fraction lets cohorts share a GPU); a task whose worker dies is retried up to `max_retries` times and resumes
    from its checkpoint. Connects to `address` (or
    starts a local instance, which dies with this process) unless Ray is already initialised. Run dirs must be on a shared path.
    """
    try:
        import ray
    except ImportError:
        raise ImportError("the ray executor needs Ray: pip install 'mecheval[ray]'") from None

    from mecheval.sweeps.reaper import reap_with_me

    started = not ray.is_initialized()
    reaper = None
    if started:
        check_reachable(address)
        ray.init(address=address)
        reaper = reap_with_me() if address is None else None  # a local Ray dies with this process
    from mecheval.training.trainer import TrainingInterrupted

    try:
        task = ray.remote(run_on_ray)
        refs = {}
        for job in jobs:
            res = (job.members[0] if isinstance(job, CohortJob) else job).config["resources"]
            opts = {"num_cpus": res["num_cpus"], "num_gpus": res["num_gpus"], "max_retries": max_retries, "name": job.name,
                    "retry_exceptions": [TrainingInterrupted]}  # a SIGTERM: retried from the checkpoint
            refs[task.options(**opts).remote(*submit(job, max(1, int(res["num_cpus"]))))] = job
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                job = refs[done[0]]
                try:
                    result = ray.get(done[0])
                except Exception as e:
                    yield from outcomes(job, None, e)
                else:
                    yield from outcomes(job, result)
        except BaseException:
            for ref in pending:  # queued tasks never start; running ones get a KeyboardInterrupt
                ray.cancel(ref)
            raise
    finally:
        if started:
            ray.shutdown()
        if reaper is not None:
            reaper.kill()


def check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """A `host:port` (or `ray://host:port`) Ray address must accept a connection within `timeout_s`
    (ray.init would otherwise retry for minutes); `auto`, None and other forms are left to Ray."""
    if not address or address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConnectionError(f"cannot reach a Ray cluster at {address} ({e.strerror or e})") from None


def _describe(e: BaseException) -> str:
    if isinstance(e, RunFailed):
        return str(e)
    return "".join(traceback.format_exception_only(type(e), e)).strip()
