"""The scalar-decay multi-head SSM of Mamba-2 (Dao & Gu, 2024, "Transformers are SSMs", sec. 3) and of
Mamba-3 SISO (Lahoti et al., 2026), per head:

    h_t = a_t h_{t-1} + Σ_r x_t^r (B_t^r)^T,   a_t = exp(log a_t) in (0, 1]        h: [P, N]
    y_t = h_t C_t                                                                 y: [P]

Shapes: x [B, T, H, P, R]; Bm [B, T, H, N, R]; Cm [B, T, H, N]; log_a [B, T, H] (<= 0); h [B, H, P, N].
The input is a sum of R rank-one terms: Mamba-2 writes one (x^1_t = Δ_t x_t, R = 1); Mamba-3's
trapezoidal rule two, the current token's γ_t x_t B_t^T and the previous token's β_t x_{t-1} B_{t-1}^T.
(Weighting x by Δ, γ or β is the caller's business.)

`ssd` (training) is the chunked dual form (sec. 6): within a chunk the masked attention-like form
    y_t = Σ_{s<=t in chunk} exp(c_t − c_s) Σ_r (C_t · B_s^r) x_s^r,   c_t = Σ_{r<=t} log a_r   (sec. 4, eq. 16)
and across chunks the state, carried by T / L steps of the recurrence. `ssd_step` is one step of the
recurrence (the mixers' step forms and `ssd_loop`, the reference the chunked form is tested against).
Only exponents <= 0 are ever taken (the masked ones are -inf before exp): nothing overflows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mecheval.models.ops.chunks import chunk_grid, into_chunks
from mecheval.models.ops.selective_scan import linear_scan


def ssd_step(x_t, B_t, C_t, log_a_t, h):
    """One step: x_t [B, H, P, R]; B_t [B, H, N, R]; C_t [B, H, N]; log_a_t [B, H]; h [B, H, P, N]
    -> (y_t [B, H, P], new h)."""
    h = log_a_t.exp()[..., None, None] * h + torch.einsum("bhpr,bhnr->bhpn", x_t, B_t)
    return torch.einsum("bhpn,bhn->bhp", h, C_t), h


def ssd_loop(x, Bm, Cm, log_a):
    """Plain per-step loop (the reference): -> y [B, T, H, P]."""
    Bsz, T, H, P, _ = x.shape
    h = x.new_zeros(Bsz, H, P, Bm.shape[3])
    ys = []
    for t in range(T):
        y, h = ssd_step(x[:, t], Bm[:, t], Cm[:, t], log_a[:, t], h)
        ys.append(y)
    return torch.stack(ys, dim=1)


def ssd(x, Bm, Cm, log_a, chunk_size: int = 64):
    """The chunked dual form (module docstring), same signature and result as `ssd_loop`."""
    Bsz, T, H, P, _ = x.shape
    nc, L = chunk_grid(T, chunk_size)  # padded steps have x = 0 and log a = 0: the state passes through
    x, Bm, Cm, log_a = (into_chunks(z, nc, L) for z in (x, Bm, Cm, log_a))  # [B, nc, L, ...]
    c = log_a.cumsum(2)  # [B, nc, L, H], within each chunk
    later = ~torch.ones(L, L, dtype=torch.bool, device=x.device).tril()  # s > t
    decay = (c[:, :, :, None] - c[:, :, None, :]).masked_fill(later[..., None], float("-inf")).exp()  # [B, nc, t, s, H]
    scores = torch.einsum("bcthn,bcshnr->bctshr", Cm, Bm) * decay[..., None]  # exp(c_t − c_s) C_t · B_s^r
    y = torch.einsum("bctshr,bcshpr->bcthp", scores, x)  # within the chunk
    to_end = (c[:, :, -1:] - c).exp()  # [B, nc, L, H]: the decay from s to the chunk's end
    own = torch.einsum("bcshpr,bcshnr->bchpn", x * to_end[..., None, None], Bm)  # each chunk's inputs at its end
    a_chunk = c[:, :, -1].exp()[..., None, None].expand_as(own)  # [B, nc, H, P, N]
    h_end = linear_scan(a_chunk, own, dim=1)  # the state at each chunk's end
    h_in = F.pad(h_end[:, :-1], (0, 0, 0, 0, 0, 0, 1, 0))  # the state entering each chunk
    y = y + torch.einsum("bchpn,bcthn->bcthp", h_in, Cm * c.exp()[..., None])  # the state entering, decayed to t
    return y.reshape(Bsz, nc * L, H, P)[:, :T]


def ssd_state_at(x, Bm, log_a, pos):
    """The state after pos (one per row), in closed form: h_pos = Σ_{s<=pos} exp(c_pos − c_s) Σ_r x_s^r (B_s^r)^T.
    x [n, T, H, P, R]; Bm [n, T, H, N, R]; log_a [n, T, H]; pos [n] -> h [n, H, P, N]."""
    c = log_a.cumsum(1)
    c_pos = c[torch.arange(len(pos)), pos][:, None]  # [n, 1, H]
    keep = (torch.arange(x.shape[1], device=x.device)[None] <= pos[:, None])[..., None]  # [n, T, 1]
    decay = torch.where(keep, c_pos - c, float("-inf")).exp()
    return torch.einsum("nsh,nshpr,nshkr->nhpk", decay, x, Bm)


def ssd_state_response(Cm, log_a, pos, dh):
    """The change of y when the state after pos moves by dh [n, H, P, N]: Δy_s = exp(c_s − c_pos) dh C_s for
    s > pos, 0 for s <= pos. Cm [n, T, H, N]; log_a [n, T, H] -> Δy [n, T, H, P]."""
    c = log_a.cumsum(1)
    c_pos = c[torch.arange(len(pos)), pos][:, None]
    acts = (torch.arange(Cm.shape[1], device=Cm.device)[None] > pos[:, None])[..., None]
    decay = torch.where(acts, c - c_pos, float("-inf")).exp()  # [n, T, H]
    return torch.einsum("nth,nhpk,nthk->nthp", decay, dh, Cm)


def ssd_states(x, Bm, log_a):
    """The state after every t, by the recurrence: -> h [n, T, H, P, N]."""
    inputs = torch.einsum("nthpr,nthkr->nthpk", x, Bm)
    return linear_scan(log_a.exp()[..., None, None].expand_as(inputs), inputs, dim=1)


def ssd_states_response(Cm, log_a, dh):
    """The change of y when the state after every t moves by dh[:, t] [n, T, H, P, N] at once: with
    g_s = a_s g_{s-1} + dh_s (the moves carried forward), Δy_s = (a_s g_{s-1}) C_s, Δy_0 = 0 -> [n, T, H, P]."""
    a = log_a.exp()[..., None, None].expand_as(dh)
    g = linear_scan(a, dh, dim=1)
    dy = torch.einsum("nthpk,nthk->nthp", a[:, 1:] * g[:, :-1], Cm[:, 1:])
    return F.pad(dy, (0, 0, 0, 0, 1, 0))
