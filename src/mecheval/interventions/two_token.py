"""Mamba-3's two-token term ablated: does the trapezoidal update's previous-token input play the short conv's role?

Mamba-3 (`models.mixers.mamba3`) has no short convolution; its trapezoidal update writes the previous token
into the state again, β_t x_{t-1} B_{t-1}^T, which the site `layers.{i}.two_token` carries (β_t x_{t-1}).
If that term binds a key to its value as Mamba's conv does, zeroing it must break retrieval, as zeroing
Mamba's conv taps of lag >= 1 does (`conv_window.conv_ablation`, its analogue).

`two_token_ablation`: accuracy with the term zeroed in each layer alone and in all layers together. Columns:
`layers, acc, acc_lo, acc_hi, n` (the unablated model is the row `layers = "none"`); only that row for a
model without the site.
"""

from __future__ import annotations

import pandas as pd
import torch

from mecheval.interventions.accuracy import accuracy
from mecheval.interventions.metrics import accuracy_interval
from mecheval.models.lm import LM
from mecheval.models.sites import attach
from mecheval.tasks import Batch

TWO_TOKEN = "two_token.parquet"  # a run's ablation table (`intervene_run`'s `two-token` analysis)


def two_token_sites(lm: LM) -> dict[int, str]:
    """Layer index -> the name of its `two_token` site (layers of other mixers are absent)."""
    return {int(name.split(".")[1]): name for name in lm.sites() if name.endswith(".two_token")}


def two_token_ablation(lm: LM, batch: Batch) -> pd.DataFrame:
    """The ablation table (module docstring)."""
    sites = two_token_sites(lm)
    groups = {"none": []} | ({"+".join(map(str, sites)): list(sites.values())} if len(sites) > 1 else {})
    groups |= {str(i): [name] for i, name in sites.items()}
    was_training = lm.training
    lm.eval()
    rows = []
    try:
        for layers, names in groups.items():
            with attach(lm.sites(), {name: torch.zeros_like for name in names}):
                k, n = accuracy(lm, batch)
            lo, hi = accuracy_interval(k, n)
            rows.append({"layers": layers, "acc": k / n, "acc_lo": lo, "acc_hi": hi, "n": n})
    finally:
        lm.train(was_training)
    return pd.DataFrame(rows)
