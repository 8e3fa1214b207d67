"""Per-example statistics of a batch: lengths, key-value distance, tree depth."""

from __future__ import annotations

import numpy as np

from mecheval.tasks.batch import Batch


def example_stats(batch: Batch) -> dict[str, np.ndarray]:
    """name -> [B] values: `length` (tokens), `context` (tokens between <bos> and the separator,
    when the task has one), `kv_distance` (value position - key position; first query for MQAR),
    `depth` (deepest terminal of the tree, ATR only)."""
    first = lambda x: (x[:, 0] if x.dim() == 2 else x).numpy()  # noqa: E731
    out = {"length": batch.lengths.numpy()}
    if "sep" in batch.roles:
        out["context"] = first(batch.roles["sep"]) - 1
    out["kv_distance"] = first(batch.roles["value"]) - first(batch.roles["key"])
    if "depth" in batch.extra:
        out["depth"] = batch.extra["depth"].amax(1).numpy()
    return out


def summarize(values: np.ndarray) -> dict[str, float]:
    """mean / std / min / median / p90 / max of `values`."""
    v = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(v.mean()),
        "std": float(v.std()),
        "min": float(v.min()),
        "median": float(np.median(v)),
        "p90": float(np.quantile(v, 0.9)),
        "max": float(v.max()),
    }
