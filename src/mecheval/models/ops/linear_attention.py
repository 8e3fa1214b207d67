"""Causal normalised linear attention on feature-mapped queries and keys:

    y_t = sum_{s <= t} (q_t · k_s) v_s / (sum_{s <= t} q_t · k_s + eps)
q, k: [B, H, T, P] (already through the feature map); v: [B, H, T, Dv]; y: [B, H, T, Dv].

`causal_linear_attention` is the chunked form: within a chunk of c steps the masked c × c scores
(quadratic), across chunks the running sums S = sum_s k_s v_s^T [P, Dv] and z = sum_s k_s [P] of all
earlier chunks (an exclusive cumsum over chunks), so there is no loop over time.
`causal_linear_attention_quadratic` is the T × T reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mecheval.models.ops.straddle import straddle_sum


def causal_linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_size: int = 64, eps: float = 1e-12
) -> torch.Tensor:
    """The chunked form (see module docstring): [B, H, T, P] x2, [B, H, T, Dv] -> [B, H, T, Dv]."""
    B, H, T, P = q.shape
    c = min(chunk_size, T)
    n = -(-T // c)
    pad = n * c - T  # zero queries/keys/values at the end: they add nothing to earlier steps
    q, k, v = (F.pad(x, (0, 0, 0, pad)).view(B, H, n, c, x.shape[-1]) for x in (q, k, v))
    scores = (q @ k.transpose(-1, -2)).tril()  # [B, H, n, c, c], s <= t within the chunk
    kv = k.transpose(-1, -2) @ v  # [B, H, n, P, Dv], each chunk's sum of k_s v_s^T
    S = torch.cat([torch.zeros_like(kv[:, :, :1]), kv.cumsum(2)[:, :, :-1]], dim=2)  # earlier chunks
    kz = k.sum(-2)  # [B, H, n, P]
    z = torch.cat([torch.zeros_like(kz[:, :, :1]), kz.cumsum(2)[:, :, :-1]], dim=2)
    num = scores @ v + q @ S  # [B, H, n, c, Dv]
    den = scores.sum(-1) + (q @ z.unsqueeze(-1)).squeeze(-1)  # [B, H, n, c]
    return (num / (den.unsqueeze(-1) + eps)).reshape(B, H, n * c, -1)[:, :, :T]


def causal_linear_attention_quadratic(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eps: float = 1e-12
) -> torch.Tensor:
    """The reference: the masked T × T score matrix, normalised by its row sums. -> [B, H, T, Dv]."""
    scores = (q @ k.transpose(-1, -2)).tril()
    return (scores @ v) / (scores.sum(-1, keepdim=True) + eps)


def linear_attention_state_at(k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor):
    """The running sums after pos (one per row): S = Σ_{s<=pos} k_s v_s^T [n, H, P, Dv] and
    z = Σ_{s<=pos} k_s [n, H, P]; k [n, H, T, P], v [n, H, T, Dv], pos [n]."""
    keep = (torch.arange(k.shape[2], device=k.device)[None] <= pos[:, None]).to(k.dtype)[:, None, :, None]
    k = k * keep
    return k.transpose(-1, -2) @ v, k.sum(-2)


def linear_attention_states(k: torch.Tensor, v: torch.Tensor):
    """The running sums after every t: S [n, H, T, P, Dv], z [n, H, T, P] (k [n, H, T, P], v [n, H, T, Dv])."""
    return (k[..., :, None] * v[..., None, :]).cumsum(2), k.cumsum(2)


def _change_from_moved_sums(q, k, v, dnum, dden, eps: float) -> torch.Tensor:
    """The change of the output when its numerator moves by dnum [n, H, T, Dv] and its normaliser by dden
    [n, H, T, 1] (exactly 0 where both are 0), by the T × T form."""
    scores = (q @ k.transpose(-1, -2)).tril()
    num, den = scores @ v, scores.sum(-1, keepdim=True) + eps
    return (num + dnum) / (den + dden) - num / den


def linear_attention_state_response(q, k, v, pos, dS, dz, eps: float = 1e-12) -> torch.Tensor:
    """The change of the output when the sums after pos move by dS [n, H, P, Dv], dz [n, H, P]: for t > pos the
    numerator gains q_t · dS and the normaliser q_t · dz (the sums carry no decay) -> [n, H, T, Dv]."""
    acts = (torch.arange(q.shape[2], device=q.device)[None] > pos[:, None]).to(q.dtype)[:, None, :, None]
    return _change_from_moved_sums(q, k, v, acts * (q @ dS), acts * (q @ dz.unsqueeze(-1)), eps)


def linear_attention_states_response(q, k, v, dS, dz, eps: float = 1e-12) -> torch.Tensor:
    """The change of the output when the sums after every t move by dS[:, :, t] [n, H, T, P, Dv] and
    dz[:, :, t] [n, H, T, P] at once: at s the sums carry the moves of every t < s -> [n, H, T, Dv]."""
    before = lambda d: F.pad(d.cumsum(2)[:, :, :-1], (0, 0) * (d.dim() - 3) + (1, 0))  # Σ_{t<s} d_t
    dnum = torch.einsum("nhtp,nhtpd->nhtd", q, before(dS))
    return _change_from_moved_sums(q, k, v, dnum, (q * before(dz)).sum(-1, keepdim=True), eps)


def linear_attention_first_order(q, k, v, k2, v2, gs, eps: float = 1e-12) -> list[torch.Tensor]:
    """For every t, the first-order change of m from setting the sums after t to another input's,
    (S'_t − S_t, z'_t − z_t) · ∂m/∂(S_t, z_t), from the keys and values of both inputs (k2, v2: the other's)
    and each g = ∂m/∂y [n, H, T, Dv] in `gs` -> [n, T] each.

    Moving the sums after t by (dS, dz) moves y_s (s > t) by (q_s dS − y_s q_s · dz) / den_s to first order,
    and dS_t = Σ_{r<=t} (k'_r v'_r^T − k_r v_r^T), dz_t = Σ_{r<=t} (k'_r − k_r). With a_s = g_s / den_s and
    b_s = y_s · a_s the product is Σ_{r<=t<s} N[r, s] over heads,
        N[r, s] = (q_s · k'_r)(v'_r · a_s − b_s) − (q_s · k_r)(v_r · a_s − b_s):
    the quadratic (T × T) form of linear attention, no state materialised."""
    scores, scores2 = q @ k.transpose(-1, -2), q @ k2.transpose(-1, -2)  # [n, H, s, r]
    causal = scores.tril()
    den = causal.sum(-1, keepdim=True) + eps  # [n, H, T, 1]
    y = causal @ v / den

    def product(g):
        a = g / den
        b = (y * a).sum(-1, keepdim=True)  # y_s · a_s: [n, H, T, 1]
        N = scores2 * (a @ v2.transpose(-1, -2) - b) - scores * (a @ v.transpose(-1, -2) - b)  # [n, H, s, r]
        return straddle_sum(N.sum(1).transpose(-1, -2))  # [n, r, s] -> [n, T]

    return [product(g) for g in gs]
