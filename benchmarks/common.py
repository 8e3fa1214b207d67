"""Timing helpers shared by the benchmarks (imported by the scripts next to it; runs nothing itself)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_seconds(fn: Callable[[], object], repeats: int = 3, warmup: int = 1, budget_s: float = 30.0) -> float:
    """Median wall time of `fn()` over up to `repeats` timed calls after `warmup` untimed ones.

    Stops repeating once the timed calls have used `budget_s` (there is always at least one); a
    warmup call slower than `budget_s` is itself the one measurement, so a slow reference (a per-step
    loop at T=1024) costs one call, not two.
    """
    for _ in range(warmup):
        first = seconds(fn)
        if first > budget_s:
            return first
    times: list[float] = []
    while len(times) < repeats and sum(times) < budget_s:
        times.append(seconds(fn))
    return statistics.median(times)
