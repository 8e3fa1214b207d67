"""The delta rule (Schlag et al., 2021; chunkwise form of Yang et al., 2024, "Parallelizing Linear
Transformers with the Delta Rule over Sequence Length") and the gated delta rule (Yang, Kautz &
Hatamizadeh, 2025, "Gated Delta Networks", eq. 10, with S = their S^T), per head, state S: [d_k, d_v]:

    S_t = α_t (I - β_t k_t k_t^T) S_{t-1} + β_t k_t v_t^T  =  S'_t + β_t k_t (v_t - S'_t^T k_t)^T,  S'_t = α_t S_{t-1}
    o_t = S_t^T q_t

Shapes: q, k: [B, T, H, d_k]; v: [B, T, H, d_v]; beta: [B, T, H]; g = log α: [B, T, H] (<= 0; None: α = 1,
the delta rule); o: [B, T, H, d_v]; S: [B, H, d_k, d_v]. (Scaling and normalising q, k is the caller's business.)

Chunkwise form (chunk of L rows K, V, Q, β entering with state S; Γ_t = exp(Σ_{r<=t in chunk} g_r) and
Γ_ts = Γ_t / Γ_s = exp(Σ_{r=s+1..t} g_r), computed as exponents <= 0): the WY / UT transform
    T = (I + A)^{-1},  A_ts = β_t Γ_ts k_t · k_s (s < t, else 0),   W = T diag(β Γ) K,   U = T diag(β) V
gives the pseudo-values U' = U - W S (row t: β_t (v_t - S'_t^T k_t)), and
    O = diag(Γ) Q S + (Γ_ts ∘ tril(Q K^T)) U',      S_next = Γ_L S + (diag(Γ_Ls) K)^T U'.
"""

from __future__ import annotations

import torch

from mecheval.models.ops.chunks import chunk_grid, into_chunks


def delta_rule_step(q_t, k_t, v_t, beta_t, S, g_t=None):
    """One step: q_t, k_t [B, H, d_k]; v_t [B, H, d_v]; beta_t, g_t [B, H]; S [B, H, d_k, d_v] -> (o_t, S)."""
    if g_t is not None:
        S = g_t.exp()[..., None, None] * S
    u_t = beta_t[..., None] * (v_t - torch.einsum("bhkv,bhk->bhv", S, k_t))  # [B, H, d_v]
    S = S + k_t[..., :, None] * u_t[..., None, :]
    return torch.einsum("bhkv,bhk->bhv", S, q_t), S


def delta_rule_loop(q, k, v, beta, g=None):
    """Plain per-step loop (the reference): -> o [B, T, H, d_v]."""
    Bsz, T, H, dk = k.shape
    S = q.new_zeros(Bsz, H, dk, v.shape[-1])
    outs = []
    for t in range(T):
        o, S = delta_rule_step(q[:, t], k[:, t], v[:, t], beta[:, t], S, None if g is None else g[:, t])
        outs.append(o)
    return torch.stack(outs, dim=1)


def delta_rule(q, k, v, beta, g=None, chunk_size: int = 64):
    """Chunkwise (gated) delta rule (module docstring): all chunks' W, U at once, then T / L steps of the state."""
    Bsz, T, H, dk = k.shape
    dv = v.shape[-1]
    nc, L = chunk_grid(T, chunk_size)  # padded rows have k = v = q = β = g = 0: no change to the state
    g = beta.new_zeros(beta.shape) if g is None else g

    def chunks(x):  # [B, T, H, ...] -> [B, H, nc, L, ...]
        return into_chunks(x, nc, L).transpose(1, 3).transpose(2, 3)

    q, k, v, beta, g = chunks(q), chunks(k), chunks(v), chunks(beta), chunks(g)
    c = g.cumsum(-1)  # [B, H, nc, L]: log Γ_t
    later = ~torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    ratio = (c[..., :, None] - c[..., None, :]).masked_fill(later, float("-inf")).exp()  # Γ_ts [B, H, nc, L, L]
    kb, vb = k * beta[..., None], v * beta[..., None]
    A = torch.tril(ratio * (kb @ k.transpose(-1, -2)), diagonal=-1)  # β_t Γ_ti k_t·k_i, i < t
    WU = torch.linalg.solve_triangular(A, torch.cat([kb * c.exp()[..., None], vb], -1), upper=False, unitriangular=True)
    W, U = WU.split([dk, dv], dim=-1)  # (I + A)^{-1} [diag(β Γ) K, diag(β) V]
    QK = ratio * (q @ k.transpose(-1, -2))  # [B, H, nc, L, L], inclusive
    Qd, Kd = q * c.exp()[..., None], k * (c[..., -1:] - c).exp()[..., None]  # diag(Γ) Q, diag(Γ_Ls) K
    S = q.new_zeros(Bsz, H, dk, dv)
    outs = []
    chunked = (x.unbind(2) for x in (Qd, Kd, W, U, QK, c[..., -1].exp()))
    for q_c, k_c, W_c, U_c, QK_c, a_c in zip(*chunked):
        U_c = U_c - W_c @ S  # pseudo-values [B, H, L, d_v]
        outs.append(q_c @ S + QK_c @ U_c)
        S = a_c[..., None, None] * S + k_c.transpose(-1, -2) @ U_c
    o = torch.stack(outs, dim=2)  # [B, H, nc, L, d_v]
    return o.permute(0, 2, 3, 1, 4).reshape(Bsz, nc * L, H, dv)[:, :T]


def delta_rule_state_at(k, v, beta, pos, g=None):
    """The state after pos (one per row), by the recurrence up to the latest pos (states are products of
    non-diagonal transitions, so there is no closed form per position): k [n, T, H, d_k]; v [n, T, H, d_v];
    beta, g [n, T, H]; pos [n] -> S [n, H, d_k, d_v]."""
    upto = int(pos.max()) + 1
    g = None if g is None else g[:, :upto]
    return delta_rule_states(k[:, :upto], v[:, :upto], beta[:, :upto], g)[torch.arange(len(pos)), pos]


def delta_rule_state_response(q, k, beta, pos, dS, g=None):
    """The change of o when the state after pos moves by dS [n, H, d_k, d_v]: the zero-input response
    dS_s = α_s (I − β_s k_s k_s^T) dS_{s-1} for s > pos (the delta rule with v = 0), Δo_s = dS_s^T q_s;
    0 for s <= pos. q, k [n, T, H, d_k]; beta, g [n, T, H] -> Δo [n, T, H, d_v]. (The one move of
    `delta_rule_states_response`.)"""
    moves = dS.new_zeros(dS.shape[0], q.shape[1], *dS.shape[1:])
    moves[torch.arange(len(pos)), pos] = dS
    return delta_rule_states_response(q, k, beta, moves, g)


def delta_rule_states(k, v, beta, g=None):
    """The state after every t, by the recurrence: k [n, T, H, d_k]; v [n, T, H, d_v]; beta, g [n, T, H]
    -> S [n, T, H, d_k, d_v]. (unbind: one backward node per input, not T.)"""
    S, states = k.new_zeros(k.shape[0], k.shape[2], k.shape[3], v.shape[-1]), []
    gates = [None] * k.shape[1] if g is None else g.unbind(1)
    for k_t, v_t, beta_t, g_t in zip(k.unbind(1), v.unbind(1), beta.unbind(1), gates):
        _, S = delta_rule_step(k_t, k_t, v_t, beta_t, S, g_t)
        states.append(S)
    return torch.stack(states, dim=1)


def delta_rule_states_response(q, k, beta, dS, g=None):
    """The change of o when the state after every t moves by dS[:, t] [n, T, H, d_k, d_v] at once: with
    m_s = α_s (I − β_s k_s k_s^T) m_{s-1} + dS_s, Δo_s = (α_s (I − β_s k_s k_s^T) m_{s-1})^T q_s, Δo_0 = 0
    -> [n, T, H, d_v]."""
    zero_v = dS.new_zeros(dS.shape[0], dS.shape[2], dS.shape[4])
    moves = dS.unbind(1)
    gates = [None] * q.shape[1] if g is None else g.unbind(1)
    m, out = moves[0], [zero_v]
    for q_s, k_s, beta_s, g_s, dS_s in zip(*(x.unbind(1)[1:] for x in (q, k, beta)), gates[1:], moves[1:]):
        o, moved = delta_rule_step(q_s, k_s, zero_v, beta_s, m, g_s)
        out.append(o)
        m = moved + dS_s
    return torch.stack(out, dim=1)
