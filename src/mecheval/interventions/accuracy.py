"""Accuracy of a run on the intervention batch, split by the receptive-field artefact, with intervals.

    subset        all / outside / inside (`artefact.subsets`), or `distance d`: examples whose queried
                  key lies d positions before the answer position (AR: d = 3 is the last pair)
    acc, acc_lo, acc_hi, n   accuracy and its Wilson 95% interval over n examples
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import torch

from mecheval.interventions.artefact import key_distance
from mecheval.interventions.metrics import accuracy_interval
from mecheval.interventions.patching import LENGTH_GROUPS
from mecheval.models.lm import LM
from mecheval.tasks import Batch


@torch.no_grad()
def accuracy(lm: LM, batch: Batch) -> tuple[int, int]:
    """(correct answers, answers) of the model on the batch (run in groups of similar length)."""
    correct = 0
    for _, group in batch.by_length(LENGTH_GROUPS):
        pos = group.answer_pos if group.answer_pos.dim() == 2 else group.answer_pos[:, None]
        answer = group.answer if group.answer.dim() == 2 else group.answer[:, None]
        correct += int((lm(group.tokens, positions=pos).argmax(-1) == answer).sum())
    return correct, batch.answer.numel()


def accuracy_table(lm: LM, batch: Batch, masks: dict[str, torch.Tensor]) -> pd.DataFrame:
    """One row per subset in `masks` and per key distance (single-answer tasks)."""
    was_training = lm.training
    lm.eval()
    groups = dict(masks)
    if batch.answer.dim() == 1:
        dist = key_distance(batch)
        groups |= {f"distance {int(d)}": dist == d for d in torch.unique(dist)}
    rows = []
    try:
        for name, mask in groups.items():
            idx = mask.nonzero()[:, 0]
            k, n = accuracy(lm, batch.select(idx)) if len(idx) else (0, 0)
            lo, hi = accuracy_interval(k, n)
            rows.append({"subset": name, "acc": k / n if n else float("nan"), "acc_lo": lo, "acc_hi": hi, "n": n})
    finally:
        lm.train(was_training)
    return pd.DataFrame(rows)


def accuracy_fields(path: Path, subset: str) -> dict:
    """verdict.json's accuracy fields: `acc_all`, `acc_{subset}` with intervals, and their example counts."""
    table = pd.read_parquet(path).set_index("subset")
    out = {}
    for name in dict.fromkeys(["all", subset]):
        if name in table.index:
            r = table.loc[name]
            out |= {f"acc_{name}": r["acc"], f"acc_{name}_lo": r["acc_lo"], f"acc_{name}_hi": r["acc_hi"], f"n_{name}": int(r["n"])}
    return json.loads(json.dumps(out))  # plain floats
