"""The fused AdamW the runs use makes the same update as torch's reference (for-loop) AdamW."""

from __future__ import annotations

import torch

from mecheval.training.config import OptimConfig
from mecheval.training.optimizer import adamw


def test_fused_adamw_makes_the_reference_update():
    """Five steps with weight decay and per-step lr changes, from the same start and the same gradients."""
    torch.manual_seed(0)
    start = [torch.randn(5, 3), torch.randn(7), torch.randn(2, 1, 4)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(5)]
    cfg = OptimConfig(lr=3e-3, weight_decay=0.1)
    params = {mode: [torch.nn.Parameter(p.clone()) for p in start] for mode in ("fused", "reference")}
    opts = {
        "fused": adamw(params["fused"], cfg, torch.device("cpu")),
        "reference": torch.optim.AdamW(params["reference"], lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                                       weight_decay=cfg.weight_decay, foreach=False),
    }
    assert opts["fused"].defaults["fused"]
    for step, gs in enumerate(grads):
        for mode, opt in opts.items():
            for group in opt.param_groups:
                group["lr"] = cfg.lr * (step + 1) / 5  # as the trainer sets it from `lr_at`
            for p, g in zip(params[mode], gs):
                p.grad = g.clone()
            opt.step()
    for p, q, p0 in zip(params["fused"], params["reference"], start):
        assert not torch.equal(p, p0)
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
