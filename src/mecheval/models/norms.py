"""The RMSNorm the models use: `nn.RMSNorm` over the last dim (same parameters, eps and result) computed by
`ops.dispatch.rms_norm` (on CPU a fused kernel whose backward is one pass; torch's runs op by op)."""

from __future__ import annotations

import torch
from torch import nn

from mecheval.models.ops.dispatch import rms_norm


class RMSNorm(nn.RMSNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., d] -> [..., d]
        return rms_norm(x, self.weight, torch.finfo(x.dtype).eps if self.eps is None else self.eps)
