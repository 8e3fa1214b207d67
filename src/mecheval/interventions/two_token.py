"""A mixer's two-token term ablated: does its own previous-token input play the short conv's role?

Two mixers without a short convolution mix each token with the previous one by a term of their own, which the
site `layers.{i}.two_token` carries [B, T, D_site]:
    Mamba-3 (`models.mixers.mamba3`)   the trapezoidal update writes the previous token into the state again,
                                       β_t x_{t-1} B_{t-1}^T; the site carries β_t x_{t-1}
    RWKV-7 (`models.mixers.rwkv7`)     the token shift x^□_t = u_t + δ_t ⊙ μ_□ before each projection; the site
                                       carries δ_t = u_{t-1} - u_t
If that term binds a key to its value as Mamba's conv does, zeroing it must break retrieval, as zeroing
Mamba's conv taps of lag >= 1 does (`conv_window.conv_ablation`, its analogue).

`two_token_ablation`: accuracy with the term zeroed in each layer alone and in all layers together, and, as the
control that tells a binding from damage, in all layers at the value position alone (where the previous token is the
key: the one write that binds key to value) and everywhere but there. If the term binds, zeroing it at the value alone
breaks retrieval as zeroing it everywhere does, and zeroing it everywhere else does not. Columns:
`layers, acc, acc_lo, acc_hi, n`: `layers` is `none` (the unablated model), `0`, `1`, `0+1`, `0+1@value`,
`0+1@not value` (the position rows only where each example has one value); only `none` for a model without the site.
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


AT_VALUE, NOT_VALUE = "@value", "@not value"  # the position rows' suffixes


def two_token_ablation(lm: LM, batch: Batch) -> pd.DataFrame:
    """The ablation table (module docstring)."""
    sites = two_token_sites(lm)
    every = "+".join(map(str, sites))
    groups = {"none": ([], None)} | ({every: (list(sites.values()), None)} if len(sites) > 1 else {})
    groups |= {str(i): ([name], None) for i, name in sites.items()}
    value = batch.roles.get("value")
    if sites and value is not None and value.dim() == 1:  # one value per example: the position control
        at = torch.zeros(batch.tokens.shape, dtype=torch.bool)
        at[torch.arange(len(batch)), value] = True  # [B, T]
        groups |= {every + AT_VALUE: (list(sites.values()), at), every + NOT_VALUE: (list(sites.values()), ~at)}
    was_training = lm.training
    lm.eval()
    rows = []
    try:
        for layers, (names, where) in groups.items():
            with attach(lm.sites(), {name: _zeroed(where) for name in names}):
                k, n = accuracy(lm, batch)
            lo, hi = accuracy_interval(k, n)
            rows.append({"layers": layers, "acc": k / n, "acc_lo": lo, "acc_hi": hi, "n": n})
    finally:
        lm.train(was_training)
    return pd.DataFrame(rows)


def _zeroed(where: torch.Tensor | None):
    """The site function zeroing the term everywhere (`where` None) or at the positions `where` [B, T] marks."""
    if where is None:
        return torch.zeros_like
    return lambda x: x.masked_fill(where[..., None].to(x.device), 0.0)  # x [B, T, D_i]
