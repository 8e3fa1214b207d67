"""The selective scan of Mamba (Gu & Dao, 2023), eq. (2a)-(2b) discretised with zero-order hold on A:

    h_t = exp(Δ_t ⊙ A) ⊙ h_{t-1} + (Δ_t ⊙ u_t) B_t          h: [B, Di, N]
    y_t = C_t · h_t + D ⊙ u_t                                 y: [B, Di]

Shapes: u, delta: [B, T, Di]; A: [Di, N] (negative reals); Bm, Cm: [B, T, N]; D: [Di].
`delta` is already positive (softplus applied by the caller).
"""

from __future__ import annotations

import torch


def selective_scan_loop(u, delta, A, Bm, Cm, D):
    """Plain per-step loop: the ground truth the faster scans are tested against. -> y [B, T, Di]."""
    Bsz, T, Di = u.shape
    h = u.new_zeros(Bsz, Di, A.shape[1])
    ys = []
    for t in range(T):
        dA = torch.exp(delta[:, t, :, None] * A)  # [B, Di, N]
        dBu = (delta[:, t] * u[:, t])[:, :, None] * Bm[:, t, None, :]  # [B, Di, N]
        h = dA * h + dBu
        ys.append((h * Cm[:, t, None, :]).sum(-1) + D * u[:, t])
    return torch.stack(ys, dim=1)
