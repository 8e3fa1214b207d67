"""Data-generation rate (sequences/s) for batch 32 on one core: batched generators vs references.

References: a straightforward per-example Python generator for AR, and the per-example recursive
derivation + query (`tasks/atr/reference.py`) for ATR. Run: `python benchmarks/data.py`.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core (before numpy / torch load)

import random  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from mecheval.tasks import make_task  # noqa: E402
from mecheval.tasks.atr.reference import derive_one, query_one  # noqa: E402

BATCH = 32


def ar_reference(task, n: int, seed: int) -> torch.Tensor:
    """AR one document at a time with the standard library."""
    rnd = random.Random(seed)
    p, (k0, _), (v0, _) = task.params, task.key_range, task.value_range
    docs = []
    for _ in range(n):
        keys = rnd.sample(range(p.n_keys), p.n_pairs)
        values = rnd.sample(range(p.n_values), p.n_pairs)
        q = rnd.randrange(p.n_pairs)
        doc = [1]
        for k, v in zip(keys, values):
            doc += [k0 + k, v0 + v]
        docs.append(doc + [2, k0 + keys[q], v0 + values[q], 2])
    return torch.tensor(docs)


def atr_reference(task, n: int, seed: int) -> torch.Tensor:
    """ATR one document at a time: recursive derivation, then the query, then padding."""
    rng = np.random.default_rng(seed)
    docs = []
    while len(docs) < n:
        labels, parent, _ = derive_one(task.grammar, rng)
        key = query_one(labels, parent, rng, lambda q, t: True)
        if key is None or len(labels) < 3:
            continue
        ctx = [3 + x for x in labels]
        docs.append(torch.tensor([1, *ctx, 2, ctx[key], ctx[parent[key]], 2]))
    return torch.nn.utils.rnn.pad_sequence(docs, batch_first=True)


def rate(fn, min_time: float = 1.0) -> float:
    """Sequences per second of fn(seed) -> batch of BATCH, over >= min_time seconds."""
    fn(0)  # warm up
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < min_time:
        fn(calls)
        calls += 1
    return calls * BATCH / (time.perf_counter() - start)


def main() -> None:
    torch.set_num_threads(1)
    cases = [
        ("ar (16 pairs, 4096+4096)", make_task("ar"), ar_reference),
        ("atr easy", make_task("atr", grammar="easy"), atr_reference),
        ("atr medium", make_task("atr", grammar="medium"), atr_reference),
    ]
    print(f"{'task':28s} {'batched seq/s':>14s} {'reference seq/s':>16s} {'ratio':>7s}")
    for name, task, reference in cases:
        fast = rate(lambda s: task.sample(BATCH, seed=s))
        slow = rate(lambda s: reference(task, BATCH, s))
        print(f"{name:28s} {fast:14,.0f} {slow:16,.0f} {fast / slow:6.1f}x")


if __name__ == "__main__":
    main()
