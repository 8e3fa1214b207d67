"""How many torch threads a run uses: never slower than one thread.

A sweep of W workers on C cores gives each worker C // W threads at most (`threads_per_worker`); a run
allowed n > 1 threads measures its own training step with 1 and with n threads and keeps the faster
(`fastest_threads`): at the study's sizes (d = 64, T = 37) a second thread often costs more in
synchronisation than it gains, and on a shared machine it may not be free at all: cores that other processes
keep busy (the load average beyond this process's own, `free_cores`) are not offered, since a measurement taken
while they paused would pick threads that then spin (one run seen at 23 core-min instead of 5). The fused numba
kernels follow torch's thread count (`ops.numba_kernels.use_torch_threads`) and run their serial twins on one
thread.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from mecheval.models import build_model
from mecheval.tasks import make_task
from mecheval.training.config import TrainConfig
from mecheval.training.optimizer import adamw


def available_cores() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def free_cores(cores: int | None = None) -> int:
    """Cores (default: this process's) not kept busy by other processes: C minus the 1-minute load average beyond
    this process's own one, at least 1; C where the platform has no load average."""
    cores = cores or available_cores()
    try:
        others = max(0.0, os.getloadavg()[0] - 1)
    except (AttributeError, OSError):
        return cores
    return max(1, cores - round(others))


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """The most threads each of `workers` processes on `cores` cores (default: this machine's) gets: C // W >= 1."""
    return max(1, (cores or available_cores()) // max(1, workers))


def bare_step(cfg: TrainConfig, device: torch.device = torch.device("cpu")) -> Callable[[], None]:
    """One AdamW step of `cfg`'s model on one fixed batch of its task, no trainer (a throwaway model on
    `device`; on CUDA the step returns once its kernels are queued, so a timer synchronises after it)."""
    task = make_task(cfg.task.name, **cfg.task.params)
    batch = task.sample(cfg.batch_size, seed=0).to(device)
    lm = build_model(cfg.model).to(device)
    opt = adamw(lm.parameters(), cfg.optim, device)

    def step() -> None:
        logits = lm(batch.tokens, positions=batch.answer_pos)
        loss = F.cross_entropy(logits.flatten(0, -2), batch.answer.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def fastest(seconds: dict[int, list[float]]) -> int:
    """The thread count with the lowest median time (seconds per step, one list per count); ties: fewer."""
    return min(seconds, key=lambda n: (statistics.median(seconds[n]), n))


def fastest_threads(step: Callable[[], None], max_threads: int, rounds: int = 3, steps: int = 2) -> int:
    """1 or `max_threads`, whichever runs `step` faster: after one warm-up step each, `rounds` rounds
    alternate blocks of `steps` steps (so a load change hits both). Leaves torch at the answer."""
    seconds: dict[int, list[float]] = {1: [], max_threads: []}
    for r in range(rounds + 1):
        for n, times in seconds.items():
            torch.set_num_threads(n)
            start = time.perf_counter()
            for _ in range(steps if r else 1):
                step()
            if r:
                times.append((time.perf_counter() - start) / steps)
    best = fastest(seconds)
    torch.set_num_threads(best)
    return best


def use_fastest_threads(cfg: TrainConfig, max_threads: int) -> int:
    """Sets torch to the faster of 1 and `max_threads` threads for training `cfg` (measured, see
    `fastest_threads` on a throwaway model; none when `max_threads` or the free cores are 1) and returns it.
    The global RNG is left as it was."""
    max_threads = min(max_threads, free_cores())
    if max_threads <= 1:
        torch.set_num_threads(1)
        return 1
    with torch.random.fork_rng(devices=[]):
        return fastest_threads(bare_step(cfg), max_threads)
