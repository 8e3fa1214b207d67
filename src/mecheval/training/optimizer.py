"""The optimizer every run uses: AdamW as `OptimConfig` sets it (the lr is then set per step by `lr_at`)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from mecheval.training.config import OptimConfig

FUSED_DEVICES = ("cpu", "cuda")  # where torch has a fused AdamW kernel


def adamw(params: Iterable[torch.nn.Parameter], optim: OptimConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW, with torch's fused kernel on CPU and CUDA: one pass per parameter instead of a dozen
    elementwise ops (the same update; at the published AR scale on one thread the step of H3 and Mamba
    costs ~15% less, attention's ~7%: `benchmarks/paper_scale.py`)."""
    return torch.optim.AdamW(
        params, lr=optim.lr, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay,
        fused=device.type in FUSED_DEVICES,
    )
