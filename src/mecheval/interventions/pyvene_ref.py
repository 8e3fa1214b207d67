"""The study's reference implementation of a patch: pyvene, one configuration at a time (optional extra).

Used by the agreement test and the benchmark: it runs the base and the source input through pyvene's
`IntervenableModel` with a `VanillaIntervention` on one site at one position per example, as the
published code does, and scores the result like the engine does.
"""

from __future__ import annotations

import types

import torch
from torch import nn

from mecheval.interventions.engine import answer_scores
from mecheval.models.lm import LM


class _Wrapped(nn.Module):
    """The attributes pyvene reads from a Hugging Face model (`config`, `device`) around an LM."""

    def __init__(self, lm: LM) -> None:
        super().__init__()
        self.lm = lm
        self.config = types.SimpleNamespace(to_dict=dict)

    @property
    def device(self) -> torch.device:
        return next(self.lm.parameters()).device

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        return self.lm(tokens, positions=positions)


class PyveneSite:
    """One pyvene `IntervenableModel` patching `site` (built once, reused across positions).

    full_head=True runs the model's head at every position, as the published code does; False
    only at `answer_pos`, as the engine does.
    """

    def __init__(self, lm: LM, site: str, full_head: bool = False) -> None:
        import pyvene as pv

        path = {m: name for name, m in lm.named_modules()}[lm.sites()[site]]  # e.g. layers.0.mixer.core_out
        rep = pv.RepresentationConfig(
            component=f"lm.{path}.output", unit="pos", max_number_of_units=1, intervention=pv.VanillaIntervention()
        )
        self.model = pv.IntervenableModel(pv.IntervenableConfig(representations=[rep]), _Wrapped(lm.eval()))
        self.full_head = full_head

    @torch.no_grad()
    def __call__(self, base, source, position, answer, answer_pos) -> tuple[torch.Tensor, torch.Tensor]:
        """Base tokens [B, T] with the site at `position` ([B]) from source [B, T] -> (p, logit) [B] each."""
        locs = [[[int(p)] for p in position]]
        heads = None if self.full_head else answer_pos[:, None]
        base_in, source_in = {"tokens": base, "positions": heads}, {"tokens": source, "positions": heads}
        _, logits = self.model(base_in, [source_in], {"sources->base": (locs, locs)})
        if self.full_head:
            logits = logits[torch.arange(len(answer_pos)), answer_pos][:, None]
        return answer_scores(logits, answer[:, None])


def pyvene_patch(lm, base, source, site, position, answer, answer_pos) -> tuple[torch.Tensor, torch.Tensor]:
    """`PyveneSite(lm, site)(base, source, position, answer, answer_pos)`."""
    return PyveneSite(lm, site)(base, source, position, answer, answer_pos)
