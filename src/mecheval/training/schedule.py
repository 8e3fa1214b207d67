"""The learning rate as a pure function of the step (so a resumed run needs only the step)."""

from __future__ import annotations

import math

from mecheval.training.config import OptimConfig


def lr_at(step: int, total: int, optim: OptimConfig) -> float:
    """Linear warmup from 0 over round(warmup * total) steps, then cosine decay to 0 at `total`.

    `step` counts from 0 (the lr used by the (step+1)-th update); "constant" skips the cosine.
    """
    warm = round(optim.warmup * total)
    if step < warm:
        return optim.lr * (step + 1) / warm
    if optim.schedule == "constant":
        return optim.lr
    progress = (step - warm) / max(1, total - warm)
    return optim.lr * 0.5 * (1.0 + math.cos(math.pi * progress))
