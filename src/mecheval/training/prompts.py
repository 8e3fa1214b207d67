"""Which test prompts a run saw in training.

A prompt is what a model reads before it answers: an example's tokens up to and including its (first)
answer position. A test example whose prompt occurs in the run's training data can be answered from
memory; readouts and accuracies are read on the unseen ones (`unseen_sample`), and the share seen is
reported beside them. The training data are exactly what the run read (`TrainStream`): the fixed pool
where the run read all of it, else the batches of the steps it trained.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import torch

from mecheval.tasks import Batch, Task

CHUNK = 256  # training steps hashed at a time


def prompt_ids(batch: Batch) -> np.ndarray:
    """[B] uint64: a digest of each example's prompt (tokens[: first answer position + 1])."""
    pos = batch.answer_pos if batch.answer_pos.dim() == 1 else batch.answer_pos.min(1).values
    tokens = batch.tokens.to(torch.int64).cpu().numpy()
    return np.array([int.from_bytes(hashlib.blake2b(tokens[i, : int(p) + 1].tobytes(), digest_size=8).digest(), "little")
                     for i, p in enumerate(pos.tolist())], dtype=np.uint64)


def training_prompt_ids(task: Task, batch_size: int, seed: int, steps: int, pool_size: int | None,
                        order: str = "shuffle") -> np.ndarray:
    """Sorted unique prompt ids of every training example a run with these settings read in `steps` steps
    (cached by the task's name and parameters: the runs of one study share their training data)."""
    key = (task.name, repr(task.params), batch_size, seed, steps, pool_size, order)
    if key not in _CACHE:
        if len(_CACHE) >= 8:
            _CACHE.clear()
        _CACHE[key] = _training_ids(task, batch_size, seed, steps, pool_size, order)
    return _CACHE[key].copy()


_CACHE: dict[tuple, np.ndarray] = {}


def _training_ids(task: Task, batch_size: int, seed: int, steps: int, pool_size: int | None, order: str) -> np.ndarray:
    from mecheval.training.data import TrainStream

    stream = TrainStream(task, batch_size, seed, pool_size, order)
    if stream.pool is not None and steps * batch_size >= len(stream.pool):
        return np.unique(prompt_ids(stream.pool))
    ids = [prompt_ids(_cat([stream.batch(s) for s in range(start, min(start + CHUNK, steps))]))
           for start in range(0, steps, CHUNK)]
    return np.unique(np.concatenate(ids)) if ids else np.zeros(0, dtype=np.uint64)


def _cat(batches: list[Batch]) -> Batch:
    """The batches as one, padded to the longest (prompt ids read only tokens and answer positions)."""
    T = max(b.tokens.shape[1] for b in batches)
    tokens = torch.cat([torch.nn.functional.pad(b.tokens, (0, T - b.tokens.shape[1])) for b in batches])
    return Batch(tokens=tokens, lengths=torch.cat([b.lengths for b in batches]),
                 answer=torch.cat([b.answer for b in batches]), answer_pos=torch.cat([b.answer_pos for b in batches]))


def run_training_ids(run_dir, cfg) -> np.ndarray:
    """`training_prompt_ids` of the finished run in `run_dir` with config `cfg` (`load_run`'s), for the steps its
    summary says it trained."""
    from mecheval.tasks import make_task
    from mecheval.training.run_dir import RunDir

    task = make_task(cfg.task.name, **cfg.task.params)
    steps = int(RunDir(run_dir).read_summary().get("steps", cfg.steps))
    return training_prompt_ids(task, cfg.batch_size, cfg.seed, steps, cfg.train_size, cfg.train_order)


def seen(batch: Batch, train_ids: np.ndarray) -> torch.Tensor:
    """[B] bool: whether each example's prompt occurs in the training prompts `train_ids` (sorted)."""
    return torch.from_numpy(np.isin(prompt_ids(batch), train_ids, assume_unique=False))


def unseen_sample(task: Task, n: int, seed: int, split: str, train_ids: np.ndarray | None) -> tuple[Batch, dict]:
    """(n test examples whose prompts the run did not see, their provenance): drawn as `task.sample(m, seed,
    split)` with m grown until n are unseen, the first n kept. Provenance: `prompts` ("unseen", or "all"
    without training prompts), `seen_share` (the share of the m drawn that were seen) and `n_drawn` (m).
    ValueError where fewer than n unseen exist in 16 n draws."""
    if train_ids is None or len(train_ids) == 0:
        return task.sample(n, seed=seed, split=split), {"prompts": "all", "seen_share": 0.0, "n_drawn": n}
    m = n
    while True:
        batch = task.sample(m, seed=seed, split=split)
        fresh = ~seen(batch, train_ids)
        share = 1 - float(fresh.float().mean())
        if int(fresh.sum()) >= n:
            keep = fresh.nonzero()[:n, 0]
            return batch.select(keep), {"prompts": "unseen", "seen_share": share, "n_drawn": m}
        if m >= 16 * n:
            raise ValueError(f"only {int(fresh.sum())} of {m} {split} prompts were not seen in training (< {n})")
        m = min(16 * n, math.ceil(n / max(1 - share, 1 / 16) * 1.1) + 16)
