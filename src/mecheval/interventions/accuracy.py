"""Accuracy of a run on the intervention batch, split by the receptive-field artefact, with intervals.

    subset        all / outside / inside (`artefact.subsets`), or `distance d`: examples whose queried
                  key lies d positions before the answer position (AR: d = 3 is the last pair)
    acc, acc_lo, acc_hi, n   accuracy and its Wilson 95% interval over n examples

`example_table` keeps the same readout per example (examples.parquet), so that two runs intervened on the
same examples can be compared on exactly those examples (`mecheval.report.paired`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pandas as pd
import torch

from mecheval.common import read_table
from mecheval.interventions.artefact import distance_subsets, key_distance
from mecheval.interventions.metrics import accuracy_interval
from mecheval.interventions.patching import LENGTH_GROUPS
from mecheval.models.lm import LM
from mecheval.tasks import Batch

EXAMPLES = "examples.parquet"  # a run's `example_table`


@torch.no_grad()
def correct_answers(lm: LM, batch: Batch, within: Callable[[Batch], AbstractContextManager] | None = None) -> torch.Tensor:
    """[B, Q] bool: whether the model's argmax at each answer position is the answer (Q = 1 for
    single-answer tasks); run in eval mode, in groups of similar length (`Batch.by_length`: each a sub-batch cut
    to its longest), each inside `within(group)` where given (sites attached for that group's positions)."""
    out = torch.zeros(len(batch), 1 if batch.answer.dim() == 1 else batch.answer.shape[1], dtype=torch.bool)
    was_training = lm.training
    lm.eval()
    try:
        for rows, group in batch.by_length(LENGTH_GROUPS):
            pos = group.answer_pos if group.answer_pos.dim() == 2 else group.answer_pos[:, None]
            answer = group.answer if group.answer.dim() == 2 else group.answer[:, None]
            with within(group) if within else nullcontext():
                out[rows] = (lm(group.tokens, positions=pos).argmax(-1) == answer).cpu()
    finally:
        lm.train(was_training)
    return out


def accuracy(lm: LM, batch: Batch, within: Callable[[Batch], AbstractContextManager] | None = None) -> tuple[int, int]:
    """(correct answers, answers) of the model on the batch (`correct_answers`, with its `within`)."""
    return int(correct_answers(lm, batch, within).sum()), batch.answer.numel()


def example_ids(batch: Batch) -> list[str]:
    """A digest per example of its tokens up to its length and its answers: equal ids, equal examples."""
    ids = []
    for i in range(len(batch)):
        parts = (batch.tokens[i, : int(batch.lengths[i])], batch.answer[i].reshape(-1), batch.answer_pos[i].reshape(-1))
        ids.append(hashlib.blake2b(b"".join(p.to(torch.int64).numpy().tobytes() for p in parts), digest_size=8).hexdigest())
    return ids


def example_table(correct: torch.Tensor, batch: Batch, masks: dict[str, torch.Tensor]) -> pd.DataFrame:
    """One row per example of a single-answer batch: `example` (its index), `id` (`example_ids`),
    `distance` (key to answer), `correct` (`correct_answers`' [B, 1]), and a bool column per subset in `masks`."""
    if batch.answer.dim() != 1:
        raise ValueError("the example table needs one answer per example")
    table = pd.DataFrame({"example": range(len(batch)), "id": example_ids(batch),
                          "distance": key_distance(batch).tolist(), "correct": correct[:, 0].tolist()})
    for name, mask in masks.items():
        table[name] = mask.tolist()
    return table


ACCURACY_COLUMNS = ("subset", "acc", "acc_lo", "acc_hi", "n")  # accuracy.parquet, as `accuracy_table` writes it


def accuracy_table(correct: torch.Tensor, batch: Batch, masks: dict[str, torch.Tensor]) -> pd.DataFrame:
    """One row per subset in `masks` and per key distance (single-answer tasks), from `correct_answers`'
    [B, Q] on the batch."""
    groups = dict(masks) | distance_subsets(batch)
    rows = []
    for name, mask in groups.items():
        k, n = int(correct[mask].sum()), int(mask.sum()) * correct.shape[1]
        lo, hi = accuracy_interval(k, n)
        rows.append({"subset": name, "acc": k / n if n else float("nan"), "acc_lo": lo, "acc_hi": hi, "n": n})
    return pd.DataFrame(rows)


def accuracy_fields(path: Path, subset: str) -> dict:
    """verdict.json's accuracy fields: `acc_all`, `acc_{subset}` with intervals, and their example counts."""
    table = read_table(path, ACCURACY_COLUMNS).set_index("subset")
    out = {}
    for name in dict.fromkeys(["all", subset]):
        if name in table.index:
            r = table.loc[name]
            out |= {f"acc_{name}": r["acc"], f"acc_{name}_lo": r["acc_lo"], f"acc_{name}_hi": r["acc_hi"], f"n_{name}": int(r["n"])}
    return json.loads(json.dumps(out))  # plain floats
