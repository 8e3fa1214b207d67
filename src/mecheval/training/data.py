"""Training and evaluation data: step-indexed, so the batch of step s depends only on (config, s).

A resumed run therefore needs only the step to continue the exact same stream.
"""

from __future__ import annotations

import hashlib

import torch

from mecheval.tasks import Batch, Task


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any tuple of parts (distinct tuples give unrelated seeds)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class TrainStream:
    """The training batches of a run: `batch(step)` -> Batch of `batch_size` examples.

    Without a pool, step s samples fresh examples with seed derive_seed(seed, "train", s).
    With `pool_size`, a fixed pool of examples is sampled once and read in epochs (batches run across
    epoch boundaries when the pool is not a multiple): `order="shuffle"` reads each epoch in a new
    seeded permutation, `order="replay"` reads the pool in the same order every epoch (the published
    study's protocol: the same batches in the same order each epoch). A task with a fixed training set
    (`Task.training_set_size`, e.g. ATR on the published sets) gives the pool itself: its first `pool_size`
    examples, the same for every seed.
    """

    def __init__(
        self, task: Task, batch_size: int, seed: int, pool_size: int | None = None, order: str = "shuffle"
    ) -> None:
        if order not in ("shuffle", "replay"):
            raise ValueError(f"order must be 'shuffle' or 'replay', got {order!r}")
        self.task, self.batch_size, self.seed, self.order = task, batch_size, seed, order
        fixed = task.training_set_size
        if fixed is not None and not (pool_size and pool_size <= fixed):
            raise ValueError(f"task {task.name!r} trains on its fixed set of {fixed} examples: the pool size "
                             f"(train_size) must be 1..{fixed}, got {pool_size}")
        if fixed is not None:
            self.pool = task.training_set(pool_size)
        else:
            self.pool = task.sample(pool_size, derive_seed(seed, "pool"), "train") if pool_size else None
        self._perm: tuple[int, torch.Tensor] | None = None  # (epoch, permutation) cache

    def state(self) -> dict:
        """What identifies the stream (the step is the rest of its state)."""
        pool = None if self.pool is None else len(self.pool)
        return {"seed": self.seed, "batch_size": self.batch_size, "pool_size": pool, "order": self.order}

    def _epoch_perm(self, epoch: int) -> torch.Tensor:
        if self._perm is None or self._perm[0] != epoch:
            g = torch.Generator().manual_seed(derive_seed(self.seed, "epoch", epoch))
            self._perm = (epoch, torch.randperm(len(self.pool), generator=g))
        return self._perm[1]

    def batch(self, step: int) -> Batch:
        if self.pool is None:
            return self.task.sample(self.batch_size, derive_seed(self.seed, "train", step), "train")
        n = len(self.pool)
        flat = torch.arange(step * self.batch_size, (step + 1) * self.batch_size)
        epoch, rows = flat // n, flat % n
        if self.order == "replay":
            return self.pool.select(rows)
        for e in epoch.unique().tolist():
            rows[epoch == e] = self._epoch_perm(e)[rows[epoch == e]]
        return self.pool.select(rows)


def eval_sets(task: Task, splits: list[str], size: int, seed: int) -> dict[str, Batch]:
    """split -> a fixed evaluation batch of `size` examples (the same for every run with this seed)."""
    return {split: task.sample(size, derive_seed(seed, "eval", split), split) for split in splits}
