"""The selective scan of Mamba (Gu & Dao, 2023), eq. (2a)-(2b) discretised with zero-order hold on A:

    h_t = exp(Δ_t ⊙ A) ⊙ h_{t-1} + (Δ_t ⊙ u_t) B_t          h: [B, Di, N]
    y_t = C_t · h_t + D ⊙ u_t                                 y: [B, Di]

Shapes: u, delta: [B, T, Di]; A: [Di, N] (negative reals); Bm, Cm: [B, T, N]; D: [Di].
`delta` is already positive (softplus applied by the caller).

`selective_scan` (training) is a two-level chunked scan: O(chunk + T / chunk) sequential vectorised
steps instead of T. `selective_scan_step` is one step of the recurrence (the recurrent view);
`selective_scan_loop` the plain per-step loop, the ground truth the others are tested against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mecheval.models.ops.chunks import chunk_grid, into_chunks


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


def selective_scan_step(u_t, delta_t, A, B_t, C_t, D, h):
    """One step: u_t, delta_t [B, Di]; B_t, C_t [B, N]; h [B, Di, N] -> (y_t [B, Di], new h)."""
    h = torch.exp(delta_t[:, :, None] * A) * h + (delta_t * u_t)[:, :, None] * B_t[:, None, :]
    return (h * C_t[:, None, :]).sum(-1) + D * u_t, h


def linear_scan(a: torch.Tensor, b: torch.Tensor, dim: int) -> torch.Tensor:
    """h_j = a_j ⊙ h_{j-1} + b_j along `dim` from h_{-1} = 0 (a, b, h: same shape).

    Loops over `dim` (keep it short); every step is vectorised over all other dimensions.
    """
    h, hs = torch.zeros_like(b.select(dim, 0)), []
    for a_j, b_j in zip(a.unbind(dim), b.unbind(dim)):  # unbind: one backward node, not T
        h = torch.addcmul(b_j, a_j, h)
        hs.append(h)
    return torch.stack(hs, dim)


def selective_scan(u, delta, A, Bm, Cm, D, chunk_size: int = 32):
    """The selective scan in chunks of L <= chunk_size steps (same signature and result as the loop).

    1. within every chunk at once, the scan from a zero state: L vectorised steps -> h_loc;
    2. the state carried across chunk boundaries: T / L steps on [B, Di, N];
    3. h_t = h_loc_t + P_t ⊙ h_(end of previous chunk), P_t = exp(A Σ_{s<=t in chunk} Δ_s) the decay
       since the chunk start; y_t = C_t · h_t + D ⊙ u_t.
    Only decays in (0, 1] appear (exponents <= 0), so nothing overflows whatever Δ and A.
    Tensors are laid out [L, n_chunks, B, Di, N] so that every step reads a contiguous slice.
    """
    Bsz, T, Di = u.shape
    nc, L = chunk_grid(T, chunk_size)  # padded steps have Δ = 0: the state passes through unchanged

    def steps_first(z):  # [B, T, X] -> [L, nc, B, X]
        return into_chunks(z, nc, L).permute(2, 1, 0, 3).contiguous()

    dl, uu, Bp, Cp = steps_first(delta), steps_first(u), steps_first(Bm), steps_first(Cm)
    a = torch.exp(dl[..., None] * A)  # exp(Δ_t A)       [L, nc, B, Di, N]
    b = (dl * uu)[..., None] * Bp[..., None, :]  # Δ_t u_t B_t
    h_loc = linear_scan(a, b, dim=0)
    P = torch.exp(torch.cumsum(dl, dim=0)[..., None] * A)
    h_end = linear_scan(P[-1], h_loc[-1], dim=0)  # the state at each chunk's end [nc, B, Di, N]
    h_in = F.pad(h_end[:-1], (0, 0, 0, 0, 0, 0, 1, 0))  # the state entering each chunk
    h = torch.addcmul(h_loc, P, h_in)
    y = (h @ Cp[..., None]).squeeze(-1)  # C_t · h_t   [L, nc, B, Di]
    return y.permute(2, 1, 0, 3).reshape(Bsz, nc * L, Di)[:, :T] + D * u


def _cumulative(delta, pos):
    """c_t = Σ_{r<=t} Δ_r [n, T, Di], and its value at each row's pos [n, 1, Di]."""
    c = delta.cumsum(1)
    return c, c.gather(1, pos[:, None, None].expand(-1, 1, c.shape[2]))


def selective_scan_state_at(u, delta, A, Bm, pos):
    """The state after pos (one per row), in closed form with c_t = Σ_{r<=t} Δ_r:

        h_t = Σ_{r<=t} exp(A (c_t − c_r)) ⊙ (Δ_r u_r) B_r        (exponents <= 0: no overflow)

    u, delta [n, T, Di]; A [Di, N]; Bm [n, T, N]; pos [n] -> h [n, Di, N]."""
    c, c_t = _cumulative(delta, pos)
    keep = torch.arange(u.shape[1], device=u.device)[None] <= pos[:, None]  # [n, T]
    gap = torch.where(keep[..., None], c_t - c, 0.0)  # [n, T, Di]
    decay = torch.exp(gap[..., None] * A) * keep[..., None, None]  # [n, T, Di, N]
    return torch.einsum("ntdk,ntd,ntk->ndk", decay, delta * u, Bm)


def selective_scan_state_response(delta, A, Cm, pos, dh):
    """The change of y when the state after pos moves by dh [n, Di, N]: for s > pos,

        Δy_s = C_s · (exp(A (c_s − c_pos)) ⊙ dh),   0 for s <= pos

    delta [n, T, Di]; A [Di, N]; Cm [n, T, N]; pos [n] -> Δy [n, T, Di]."""
    c, c_t = _cumulative(delta, pos)
    acts = torch.arange(delta.shape[1], device=delta.device)[None] > pos[:, None]  # [n, T]
    gap = torch.where(acts[..., None], c - c_t, 0.0)
    decay = torch.exp(gap[..., None] * A) * acts[..., None, None]  # gap >= 0
    return torch.einsum("ntdk,ndk,ntk->ntd", decay, dh, Cm)


def selective_scan_states(u, delta, A, Bm):
    """The state after every t, by the recurrence: u, delta [n, T, Di]; A [Di, N]; Bm [n, T, N] -> h [n, T, Di, N]."""
    a = torch.exp(delta[..., None] * A)
    return linear_scan(a, (delta * u)[..., None] * Bm[:, :, None, :], dim=1)


def selective_scan_states_response(delta, A, Cm, dh):
    """The change of y when the state after every t moves by dh[:, t] [n, T, Di, N] at once: with
    g_s = exp(Δ_s A) ⊙ g_{s-1} + dh_s (the moves carried forward), Δy_s = C_s · (exp(Δ_s A) ⊙ g_{s-1}),
    Δy_0 = 0. delta [n, T, Di]; A [Di, N]; Cm [n, T, N] -> Δy [n, T, Di]."""
    a = torch.exp(delta[..., None] * A)
    g = linear_scan(a, dh, dim=1)
    dy = torch.einsum("ntdk,ntk->ntd", a[:, 1:] * g[:, :-1], Cm[:, 1:])
    return F.pad(dy, (0, 0, 1, 0))
