"""The receptive-field artefact: a queried pair the read point already holds at the query through short
convolutions alone.

A causal conv of kernel k lets position t read t-k+1 … t; stacked, the convs of layers 0 … L−1 let the
query (the position that predicts the answer) read back Σ_{i<L} (k_i − 1) positions without any attention
or state. The verdict reads the input of the last layer (L = n_layers − 1; a 1-layer model: layer 0's conv
output, L = 1). Where the queried pair lies within that reach, key and value are already at the query
there through the convs, and the readout is trivially "at the query". Readouts therefore default to the
examples *outside* that reach and say how many there are.

Measured (Mamba, d_conv 4, 2 layers, AR with 4 pairs; `tests/interventions/test_artefact.py`): only the
last pair (key 3 before the query, inside layer 0's reach of 3) reads @query ≈ 1; the pair before it,
which the reach of both layers (6) would also exclude, is the most key-side of all.
"""

from __future__ import annotations

import torch

from mecheval.models.lm import LM
from mecheval.models.shortconv import ShortConv
from mecheval.tasks import Batch


def short_convs(lm: LM) -> dict[int, ShortConv]:
    """Layer index -> that layer's short conv (layers without one, or with a long conv, are absent)."""
    return {i: m for i, block in enumerate(lm.layers) for m in block.mixer.modules() if isinstance(m, ShortConv)}


def conv_reach(lm: LM, layers: int | None = None) -> int:
    """How far back the answer position sees through the short convs of the first `layers` layers alone
    (default: all): Σ_{i < layers} (k_i − 1)."""
    return sum(c.kernel_size - 1 for i, c in short_convs(lm).items() if layers is None or i < layers)


def read_reach(lm: LM) -> int:
    """The conv reach before the verdict's read point: the layers before the last (at least layer 0)."""
    return conv_reach(lm, max(1, len(lm.layers) - 1))


def key_distance(batch: Batch) -> torch.Tensor:
    """Positions from the queried key (role `key`) to the answer position: [B]."""
    return batch.answer_pos - batch.roles["key"]


def inside_reach(lm: LM, batch: Batch) -> torch.Tensor:
    """[B] bool: the queried key lies within `read_reach` of the answer (multi-query batches: of any of its
    answers)."""
    inside = key_distance(batch) <= read_reach(lm)
    return inside if inside.dim() == 1 else inside.any(-1)


def distance_subsets(batch: Batch) -> dict[str, torch.Tensor]:
    """`distance d` -> [B] bool: the examples whose queried key lies d positions before the answer
    (single-answer batches; {} for multi-query ones)."""
    if batch.answer.dim() != 1:
        return {}
    dist = key_distance(batch)
    return {f"distance {int(d)}": dist == d for d in torch.unique(dist)}


def subsets(lm: LM, batch: Batch) -> dict[str, torch.Tensor]:
    """The example masks readouts are split by: `all`, `outside` (the default readout), `inside`."""
    inside = inside_reach(lm, batch)
    return {"all": torch.ones_like(inside), "outside": ~inside, "inside": inside}
