"""The full-window readout: every position that can carry the key's information to the answer.

Corrupting the queried key changes the residual stream at the read point at the key and at every later
position an earlier layer's conv or recurrence wrote it into; the published readout patches three of
them (key, value, query). Here, at the verdict's read point, the positions the read layer's short conv
(kernel k) can still combine with the key or the value, and those the answer is read at:

    key, key+1 … key+(k−1) (those before the value; ATR: none on AR, where the value is key+1), value,
    value+1 … value+(k−1), sep, query       each singly (a position past the answer or not before the
                                            value: the no-op below)
    key&value&query   the published three together: how much of the effect they explain
    window            key … value+(k−1) as above, together
    carriers          window, sep and query together: every position named above
    others            every other position between the key and the answer together (later pairs:
                      what only a recurrence carries)

At a block input every position from the key to the answer together restores the clean run exactly
(positions before the key are the same in both runs), so 1 − carriers is what `others` hold jointly.
A cell's missing positions are filled with key − 1, which both runs share (a no-op patch). Single-answer
batches only (AR, ATR).
"""

from __future__ import annotations

import pandas as pd
import torch

from mecheval.interventions.artefact import short_convs
from mecheval.interventions.patching import interchange_at
from mecheval.models.lm import LM
from mecheval.tasks import Batch, Task

PUBLISHED = "key&value&query"  # the published three positions patched together
WINDOW, CARRIERS, OTHERS = "window", "carriers", "others"
JOINTS = (PUBLISHED, WINDOW, CARRIERS, OTHERS)


def read_kernel(lm: LM, site: str, layer: int) -> int:
    """The kernel of the short conv that reads `site` of `layer` next: the layer's own conv for its input
    (`resid_pre`), none (1) for a site after it (`conv_out`) or a layer without one."""
    conv = short_convs(lm).get(layer) if site == "resid_pre" else None
    return 1 if conv is None else conv.kernel_size


def carrier_positions(batch: Batch, kernel: int) -> dict[str, torch.Tensor]:
    """Cell name -> positions [B] (singles) or [B, K] (joints) of the readout (module docstring)."""
    if batch.answer.dim() != 1:
        raise ValueError("the full-window readout reads single-answer batches (one query per sequence)")
    key, value, last = batch.roles["key"], batch.roles["value"], batch.answer_pos
    noop = key - 1  # before the key: the same in the clean and the corrupted run

    def inside(p: torch.Tensor) -> torch.Tensor:
        return torch.where(p <= last, p, noop)

    singles = {"key": key}
    singles |= {f"key+{j}": torch.where(key + j < value, key + j, noop) for j in range(1, kernel) if (key + j < value).any()}
    singles |= {"value": value} | {f"value+{j}": inside(value + j) for j in range(1, kernel)}
    singles |= {r: batch.roles[r] for r in ("sep", "query") if r in batch.roles}
    window = torch.stack([p for name, p in singles.items() if name not in ("sep", "query")], 1)
    carriers = torch.stack(list(singles.values()), 1)  # [B, K]
    published = torch.stack([key, value, batch.roles["query"]], 1)
    return singles | {PUBLISHED: published, WINDOW: window, CARRIERS: carriers, OTHERS: _others(batch, carriers, noop)}


def _others(batch: Batch, carriers: torch.Tensor, noop: torch.Tensor) -> torch.Tensor:
    """[B, K]: the positions strictly between the key and the answer that no carrier covers, padded with `noop`."""
    B, T = batch.tokens.shape
    t = torch.arange(T).expand(B, T)
    free = (t > batch.roles["key"][:, None]) & (t < batch.answer_pos[:, None])
    free &= ~torch.zeros(B, T, dtype=torch.bool).scatter(1, carriers, True)
    k = max(int(free.sum(1).max()), 1)
    ranked = torch.where(free, t, T).sort(1).values[:, :k]  # the free positions first, in order
    return torch.where(ranked < T, ranked, noop[:, None])


def carriers_table(
    lm: LM, task: Task, batch: Batch, corrupt: str, site: str, layer: int, *, seed: int = 0,
    subsets: dict[str, torch.Tensor] | str | None = "artefact", n_boot: int = 1000,
) -> pd.DataFrame:
    """The full-window readout at `site` of `layer` (sufficiency): `interchange` rows, one per cell, with
    `kernel`, the conv kernel that set the window; subsets as `interchange`'s (default: the artefact control's,
    the rows `mechanism` reads)."""
    kernel = read_kernel(lm, site, layer)
    where = carrier_positions(batch, kernel)
    df = interchange_at(lm, task, batch, corrupt, [f"layers.{layer}.{site}"], where, seed=seed, subsets=subsets,
                        n_boot=n_boot)
    return df.assign(kernel=kernel)
