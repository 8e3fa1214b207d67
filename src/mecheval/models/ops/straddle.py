"""Sums over the position pairs that straddle each t, the shape every first-order state product takes."""

from __future__ import annotations

import torch


def straddle_sum(M: torch.Tensor) -> torch.Tensor:
    """M [n, T, T] indexed [r, s] -> [n, T]: Σ_{r <= t < s} M[r, s] for every t (a prefix sum over r, then the
    entries s > t of row t)."""
    T = M.shape[-1]
    later = torch.ones(T, T, dtype=torch.bool, device=M.device).triu(1)  # [t, s]: s > t
    return (M.cumsum(-2) * later).sum(-1)
