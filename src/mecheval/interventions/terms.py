"""A mixer's own token-mixing terms ablated: does one of them play the short conv's role?

Mixers without a short convolution carry one token's information to the next by terms of their own, each
carried by a site `layers.{i}.<site>` [B, T, D_site] (`TERMS`):
    two-token   Mamba-3 (`models.mixers.mamba3`): the trapezoidal update writes the previous token into the
                state again, β_t x_{t-1} B_{t-1}^T; the site `two_token` carries β_t x_{t-1}.
                RWKV-7 (`models.mixers.rwkv7`): the token shift x^□_t = u_t + δ_t ⊙ μ_□ before each projection;
                the site `two_token` carries δ_t = u_{t-1} - u_t
    rotary      Mamba-3: B_t and C_t rotated by the cumulative angle φ_t = Σ_{s<=t} Δ_s θ_s, so that the score
                C_t · B_s turns with the angle steps between s and t; the site `rotary` carries the steps Δ_t θ_t
    reflection  DeltaProduct (`models.mixers.deltaproduct`): step sizes β in (0, 2) make each transition
                I - β k k^T a reflection along k where β > 1 (a negative eigenvalue); the site `reflection`
                carries β's part above 1, so zeroing it clamps β at 1 (no negative eigenvalues)
    all-terms   every term above that the model has, zeroed together, for a model with two or more (Mamba-3:
                the two-token term and the rotation): where each seed binds through one term or the other,
                each alone reads inconclusive over seeds; together they must break retrieval on every seed,
                or the model has a binder besides them
If a term binds a key to its value as Mamba's conv does, zeroing it must break retrieval, as zeroing Mamba's
conv taps of lag >= 1 does (`conv_window.conv_ablation`, its analogue).

`term_ablation`: accuracy with the term zeroed in each layer alone and in all layers together, and, as the
control that tells a binding from damage, in all layers at one role's position alone and everywhere but there, for
each role with one position per example (AR: key, value, sep, query). If the term binds key and value at one
position, zeroing it there alone breaks retrieval as zeroing it everywhere does, and zeroing it everywhere else
does not: for a two-token term that is the value's position (where the previous token is the key: the one write
that binds them); for the rotation, the key's step (the angle that sets the key apart from the token before it,
as a later position sees them). Columns: `layers, acc, acc_lo, acc_hi, n, examples`: `layers` is `none` (the
unablated model), `0`, `1`, `0+1`, then `0+1@key`, `0+1@not key`, `0+1@value`, ... per role; only `none` for a
model without the site; `examples` is `all` for these rows.

Where the value does not always follow its key (ATR: a dependency tree's head and its child lie 1 to ~20 tokens
apart), the value's position is where the key sits one token back only in some examples, so the controls are also
read apart by that distance (`examples`): `adjacent` (value = key + 1) has `none`, `0+1`, `0+1@value`, `0+1@not
value`; `apart` (value > key + 1) those and `0+1@key..value`, `0+1@not key..value` (SPAN: the positions key + 1 …
value, where the term carries a token of the stretch from the key to its value). A term that binds the pair along
that stretch breaks retrieval zeroed on it and not zeroed everywhere else. AR (always adjacent) has no such rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from mecheval.interventions.accuracy import accuracy
from mecheval.interventions.metrics import accuracy_interval
from mecheval.models.lm import LM
from mecheval.models.sites import attach
from mecheval.tasks import Batch


@dataclass(frozen=True)
class Term:
    """One ablatable term: its analysis name (`--analysis`), site kinds (zeroed together), table file, and words for
    notes and pages; it applies to a model with at least `min_kinds` of its site kinds."""

    analysis: str
    sites: tuple[str, ...]
    file: str
    words: str  # what the pages call it ("two-token term")
    lacks: str  # the note for a model without it (`readout.inapplicable`)
    min_kinds: int = 1


TERMS = {t.analysis: t for t in (
    Term("two-token", ("two_token",), "two_token.parquet", "two-token term",
         "two-token term (Mamba-3's trapezoidal update, RWKV-7's token shift: the analysis zeroes it per layer)"),
    Term("rotary", ("rotary",), "rotary.parquet", "rotation's angle steps",
         "data-dependent rotation (Mamba-3's rotary B and C: the analysis zeroes its angle steps per layer)"),
    Term("reflection", ("reflection",), "reflection.parquet", "negative eigenvalues (β's part above 1)",
         "negative eigenvalues (DeltaProduct's step sizes β in (0, 2): the analysis clamps β at 1 per layer)"),
    Term("all-terms", ("two_token", "rotary", "reflection"), "all_terms.parquet", "two-token term and rotation together",
         "second term of its own (Mamba-3's two-token term and rotation: the analysis zeroes them together per layer)",
         min_kinds=2),
)}
TWO_TOKEN = TERMS["two-token"].file  # a run's two-token table (`intervene_run`'s `two-token` analysis)
AT, NOT = "@", "@not "  # the position rows' suffixes: `0+1@key`, `0+1@not key`
SPAN = "key..value"  # the positions key + 1 … value (module docstring)


def term_sites(lm: LM, term: Term) -> dict[int, list[str]]:
    """Layer index -> the names of its sites of `term`'s kinds (layers without one are absent); {} where the model
    has fewer than `term.min_kinds` of the kinds."""
    names = [name for name in lm.sites() if name.rsplit(".", 1)[-1] in term.sites]
    if len({name.rsplit(".", 1)[-1] for name in names}) < term.min_kinds:
        return {}
    by_layer: dict[int, list[str]] = {}
    for name in names:
        by_layer.setdefault(int(name.split(".")[1]), []).append(name)
    return by_layer


def term_ablation(lm: LM, batch: Batch, term: Term) -> pd.DataFrame:
    """The ablation table of `term` (module docstring)."""
    sites = term_sites(lm, term)
    names = [name for layer in sites.values() for name in layer]
    every = "+".join(map(str, sites))
    whole = {"none": ([], None)} | ({every: (names, None)} if sites else {})
    layers = {str(i): (layer, None) for i, layer in sites.items()}
    roles = [role for role, pos in batch.roles.items() if pos.dim() == 1] if sites else []  # one position per example
    table = _rows(lm, batch, whole | layers | _controls(every, names, roles)).assign(examples="all")
    apart = _apart(batch) if sites else None
    if apart is None or apart.all() or not apart.any():
        return table
    parts = [_rows(lm, batch.select(which.nonzero()[:, 0]), whole | _controls(every, names, places)).assign(examples=name)
             for name, which, places in (("adjacent", ~apart, ["value"]), ("apart", apart, ["value", SPAN]))]
    return pd.concat([table, *parts], ignore_index=True)


def _controls(every: str, names: list[str], places: list[str]) -> dict:
    """The position controls' groups: the term zeroed in every layer at each place alone, and everywhere but there."""
    return {every + (AT if at else NOT) + place: (names, (place, at)) for place in places for at in (True, False)}


def _apart(batch: Batch) -> torch.Tensor | None:
    """[B] bool: the value lies more than one token after its key; None for a task without one key and value each."""
    key, value = batch.roles.get("key"), batch.roles.get("value")
    if key is None or value is None or key.dim() != 1 or value.dim() != 1:
        return None
    return value - key > 1


def _rows(lm: LM, batch: Batch, groups: dict) -> pd.DataFrame:
    """One row per group {layers: (site names zeroed, where: None (everywhere) or (place, at))}: the accuracy with
    its interval."""
    rows = []
    for layers, (names, where) in groups.items():
        k, n = accuracy(lm, batch, lambda group: attach(lm.sites(), dict.fromkeys(names, _zeroed(group, where))))
        lo, hi = accuracy_interval(k, n)
        rows.append({"layers": layers, "acc": k / n, "acc_lo": lo, "acc_hi": hi, "n": n})
    return pd.DataFrame(rows)


def _zeroed(group: Batch, where: tuple[str, bool] | None):
    """The site function for one length group (`accuracy`'s): zeroing the term everywhere (`where` None), or, for
    (place, at), at `place` (a role's position, or SPAN) if `at`, else everywhere but there (x [B_group, T_group,
    D_i])."""
    if where is None:
        return torch.zeros_like
    place, at = where
    t = torch.arange(group.tokens.shape[1])[None]  # [1, T_group]
    if place == SPAN:
        mask = (t > group.roles["key"][:, None]) & (t <= group.roles["value"][:, None])
    else:
        mask = t == group.roles[place][:, None]  # [B_group, T_group]
    mask = mask if at else ~mask
    return lambda x: x.masked_fill(mask[..., None].to(x.device), 0.0)
