"""Seed streams and vectorised draws shared by the tasks."""

from __future__ import annotations

import zlib

import numpy as np


def rng_for(task: str, seed: int, split: str, splits: tuple[str, ...]) -> np.random.Generator:
    """The generator of (task, seed, split): deterministic, independent across seeds and splits."""
    if split not in splits:
        raise ValueError(f"unknown split {split!r} for task {task!r}; expected one of {splits}")
    return np.random.default_rng([zlib.crc32(task.encode()), seed, splits.index(split)])


def distinct(rng: np.random.Generator, rows: int, n: int, k: int) -> np.ndarray:
    """[rows, k] k distinct integers from [0, n) per row, in uniformly random order.

    Sparse draws (k² ≤ n: few collisions) redraw the rows with a repeat; dense ones take the k
    smallest of n uniform keys per row.
    """
    if k * k > n:
        u = rng.random((rows, n))
        pick = np.argpartition(u, k - 1, axis=1)[:, :k]
        return np.take_along_axis(pick, rng.random((rows, k)).argsort(1), axis=1)
    out = rng.integers(0, n, size=(rows, k))
    todo = np.arange(rows)
    while len(todo):
        out[todo] = rng.integers(0, n, size=(len(todo), k))
        s = np.sort(out[todo], axis=1)
        todo = todo[(s[:, 1:] == s[:, :-1]).any(1)]
    return out


def absent(rng: np.random.Generator, tokens: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """[B] a token in [lo, hi) per row that does not occur in that row of `tokens` [B, T].

    Rejection sampling, vectorised over the rows still rejected (fast while rows use few of the range).
    """
    if hi - lo <= tokens.shape[1]:  # a row could hold the whole range
        inside = (tokens >= lo) & (tokens < hi)
        present = np.zeros((len(tokens), hi - lo), dtype=bool)
        present[np.nonzero(inside)[0], tokens[inside] - lo] = True
        if present.all(1).any():
            raise ValueError(f"every token of [{lo}, {hi}) occurs in some row: none is absent")
    out = rng.integers(lo, hi, size=len(tokens))
    todo = np.flatnonzero((tokens == out[:, None]).any(1))
    while len(todo):
        out[todo] = rng.integers(lo, hi, size=len(todo))
        todo = todo[(tokens[todo] == out[todo, None]).any(1)]
    return out


def other(rng: np.random.Generator, old: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """[B] a token in [lo, hi) different from `old` [B], uniform over the others."""
    return lo + (old - lo + rng.integers(1, hi - lo, size=len(old))) % (hi - lo)


def corruption_rng(task: str, role: str, seed: int) -> np.random.Generator:
    """The generator of a corruption of `role` with `seed` (independent of the samples' streams)."""
    return np.random.default_rng([zlib.crc32(f"{task}/corrupt/{role}".encode()), seed])
