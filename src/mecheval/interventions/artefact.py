"""The receptive-field artefact: a queried pair the query sees through short convolutions alone.

A causal conv of kernel k lets position t read t-k+1 … t. Stacked over the layers, short convs let the
query (the position that predicts the answer) read back `conv_reach` = Σ_i (k_i − 1) positions without
any attention or state. When the queried key lies that close (AR: the last one or two pairs), key and
value reach the answer position through the convs, and every readout there is trivially "at the query".
Readouts therefore default to the examples *outside* that reach and say how many there are.
"""

from __future__ import annotations

import torch

from mecheval.models.lm import LM
from mecheval.models.shortconv import ShortConv
from mecheval.tasks import Batch


def short_convs(lm: LM) -> dict[int, ShortConv]:
    """Layer index -> that layer's short conv (layers without one, or with a long conv, are absent)."""
    return {i: m for i, block in enumerate(lm.layers) for m in block.mixer.modules() if isinstance(m, ShortConv)}


def conv_reach(lm: LM) -> int:
    """How far back the answer position sees through the short convs alone: Σ_i (k_i − 1)."""
    return sum(c.kernel_size - 1 for c in short_convs(lm).values())


def key_distance(batch: Batch) -> torch.Tensor:
    """Positions from the queried key (role `key`) to the answer position: [B]."""
    return batch.answer_pos - batch.roles["key"]


def inside_reach(lm: LM, batch: Batch) -> torch.Tensor:
    """[B] bool: the queried key (and so its value, which follows it) lies within `conv_reach` of the answer
    (multi-query batches: of any of its answers)."""
    inside = key_distance(batch) <= conv_reach(lm)
    return inside if inside.dim() == 1 else inside.any(-1)


def subsets(lm: LM, batch: Batch) -> dict[str, torch.Tensor]:
    """The example masks readouts are split by: `all`, `outside` (the default readout), `inside`."""
    inside = inside_reach(lm, batch)
    return {"all": torch.ones_like(inside), "outside": ~inside, "inside": inside}
