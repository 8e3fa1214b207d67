"""The pointer control: does the query carry the answer, or only *where* the answer is?

The published readout patches the clean residual stream at the query into the key-corrupted run; a high
share restored there reads as direct retrieval (the answer already sits at the query). A model that carries
only a pointer to the value's position (attention copying the key's position in layer 0 and attending to
the position after it in layer 1) restores as much, yet holds no answer. The control separates the two:

    clean x        the example as sampled (queried value at position p)
    moved x'       `task.move`: the queried association moved, the answer unchanged; x'[p] is another token
    patched run    x' with the clean activation at the query (x's query position) patched in at the read
                   point (`layers.{layer}.{site}`), at x''s query position

Per example the patched run's argmax either follows the answer (the query carried it), follows the old
position (it outputs x'[p]: the query carried where the value was), or neither. Read only on examples the
model answers correctly unpatched, clean and moved, whose moved x'[p] differs from the answer. Shares come
with Wilson 95% intervals; `carries` decides by them (`verdict.POINTER_SHARE`).
"""

from __future__ import annotations

import pandas as pd
import torch

from mecheval.interventions.metrics import accuracy_interval
from mecheval.models.lm import LM
from mecheval.models.sites import attach, record
from mecheval.tasks import Batch, Task

POINTER = "pointer.parquet"  # a run's pointer control, at its verdict's read point
FOLLOWS = ("answer", "position")  # what the patched run's output can follow
POINTER_COLUMNS = ("n", *(f"{f}{end}" for f in FOLLOWS for end in ("", "_lo", "_hi")))  # what reports read of POINTER


@torch.no_grad()
def _predictions(lm: LM, batch: Batch, patch: dict | None = None) -> torch.Tensor:
    """[B] argmax at the answer position, with `patch` = {site: fn} attached during the run."""
    with attach(lm.sites(), patch or {}):
        return lm(batch.tokens, positions=batch.answer_pos).argmax(-1)


@torch.no_grad()
def pointer_control(lm: LM, task: Task, batch: Batch, site: str, layer: int, *, seed: int = 0,
                    mask: torch.Tensor | None = None) -> pd.DataFrame:
    """One row: the control (module docstring) at `site` of `layer` on the examples of `batch` (those of
    `mask` [B] where given): `n` examples read, `answer` / `position` shares with `_lo` / `_hi` intervals,
    `acc_moved` (unpatched accuracy on the moved batch), `layer`, `site`."""
    name = f"layers.{layer}.{site}"
    moved, old = task.move(batch, seed)
    rows = torch.arange(len(batch))
    was_training = lm.training
    lm.eval()
    try:
        with record(lm.sites(), [name]) as cache:
            clean_pred = lm(batch.tokens, positions=batch.answer_pos).argmax(-1)
        source = cache[name][rows, batch.roles["query"]].clone()  # [B, D]: the clean query's activation
        moved_pred = _predictions(lm, moved)

        def put(x: torch.Tensor) -> torch.Tensor:
            x = x.clone()
            x[rows, moved.roles["query"]] = source.to(x.dtype)
            return x

        patched = _predictions(lm, moved, {name: put})
    finally:
        lm.train(was_training)
    at_old = moved.tokens[rows, old]
    keep = (clean_pred == batch.answer) & (moved_pred == moved.answer) & (at_old != batch.answer)
    if mask is not None:
        keep &= mask.to(keep.device)
    n = int(keep.sum())
    row = {"layer": layer, "site": site, "n": n, "acc_moved": float((moved_pred == moved.answer).float().mean())}
    for follows, target in zip(FOLLOWS, (batch.answer, at_old)):
        k = int(((patched == target) & keep).sum())
        row[follows] = k / n if n else float("nan")
        row[f"{follows}_lo"], row[f"{follows}_hi"] = accuracy_interval(k, n)
    return pd.DataFrame([row])
