"""Short causal depthwise convolution, the pure-PyTorch op (the reference the fused kernel is tested against).

    y[b, t, c] = Σ_{j=0}^{k-1} w[c, j] x[b, t - (k-1) + j, c]          (x = 0 before t = 0)

Shapes: x, y: [B, T, C]; weight: [C, 1, k] (a depthwise `nn.Conv1d`'s layout).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def short_conv(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`F.conv1d` over channels-first x, padded with k - 1 zeros on the left. -> y [B, T, C]."""
    k = weight.shape[-1]
    xt = F.pad(x.transpose(1, 2), (k - 1, 0))  # [B, C, T + k - 1]
    return F.conv1d(xt, weight, groups=weight.shape[0]).transpose(1, 2)
