"""How the fused numba kernels are compiled and run: threading layer, vector width, thread count, serial twins.

Every fused kernel is a `parallel_kernel`: compiled twice from one source, with `prange` as a parallel
loop and as a plain loop, and each call takes the serial twin when numba runs on one thread. A
parallel launch costs about 0.15 ms even on one thread under the fork-safe workqueue layer (measured:
the short conv's forward at [32, 37, 128] × 4 taps, 0.24 ms parallel vs 0.06 ms serial), more than
most of these kernels' work at the study's sizes. The twins run the same loop bodies, so their results
agree (tests compare them).

A reassociated (vectorised) sum never shares its loop with a store: LLVM runs a storing loop scalar when a
run-time check finds its arrays close together in memory, which would make a sum's order, and so its last
bits, depend on where the heap put them (`delta_rule_fused` explains the case that taught it).

On CPUs with AVX-512, LLVM's tuning for most of them prefers 256-bit vectors; the kernels are compiled
for 512-bit ones instead (measured on the published AR step, one thread: Mamba +7%, DeltaNet +16%, H3
+6%; `benchmarks/paper_scale.py`). Like the threading layer this is numba's process-wide setting, made
only when the user has not set it (`NUMBA_CPU_FEATURES`), and it acts only if numba has compiled
nothing yet in the process.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable

import numba
import numpy as np
import torch
from numba import njit
from numba.core.codegen import get_host_cpu_features

if "NUMBA_THREADING_LAYER" not in os.environ:  # GNU OpenMP kills children forked after a parallel launch
    numba.config.THREADING_LAYER = "workqueue"  # fork-safe; not for concurrent calls from several threads
if "NUMBA_CPU_FEATURES" not in os.environ and "+avx512f" in (host := get_host_cpu_features()).split(","):
    numba.config.CPU_FEATURES = host + ",-prefer-256-bit"  # the host's features, 512-bit vectors preferred


def use_torch_threads() -> None:
    """Run numba on as many threads as torch was told to use (e.g. 1 per worker in a sweep)."""
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A contiguous numpy view (or copy) of a CPU tensor, detached."""
    return t.detach().contiguous().numpy()


def _renamed(fn: Callable, suffix: str) -> Callable:
    """A copy of `fn` under another qualified name (numba's on-disk cache is keyed by it)."""
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + suffix, fn.__defaults__, fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + suffix
    twin.__doc__ = fn.__doc__
    return twin


class ParallelKernel:
    """A jitted kernel with a `parallel` and a `serial` compilation; a call takes the serial one when
    numba runs on one thread."""

    def __init__(self, fn: Callable, **jit_options) -> None:
        self.parallel = njit(parallel=True, cache=True, **jit_options)(fn)
        self.serial = njit(cache=True, **jit_options)(_renamed(fn, "__serial"))
        self.__doc__, self.__name__ = fn.__doc__, fn.__name__

    def __call__(self, *args):
        return (self.serial if numba.get_num_threads() == 1 else self.parallel)(*args)


def parallel_kernel(**jit_options) -> Callable[[Callable], ParallelKernel]:
    """Decorator: `fn` (its outer loop a `prange`) as a `ParallelKernel`; `jit_options` go to `njit`
    (cache=True always)."""
    return lambda fn: ParallelKernel(fn, **jit_options)
