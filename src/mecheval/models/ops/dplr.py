"""The diagonal-plus-low-rank (DPLR) linear recurrence shared by GLA, RWKV-7 and DeltaProduct, per head,
state S: [d_k, d_v] (keys index rows, as in `ops.delta_rule`):

    S_t = (diag(w_t) + b_t a_t^T) S_{t-1} + k_t v_t^T,     o_t = S_t^T q_t
        = w_t ⊙ S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T   (w_t ⊙ scales the rows)

with w_t = exp(log_w_t) in (0, 1] per key dimension (or one per head: log_w's last dim 1).
    GLA           w_t = α_t, no low-rank term (a = b = None)
    RWKV-7        w_t its vector decay, a_t = -κ̂_t, b_t = κ̂_t ⊙ a_t (its S transposed: S_t^T here)
    delta rule    w_t = 1, a_t = k_t, b_t = -β_t k_t, and the write (β_t k_t) v_t^T: S_t = (I - β_t k_t k_t^T) S_{t-1}
                  + β_t k_t v_t^T; DeltaProduct runs n_h of these per token (`mixers.deltaproduct`)
Shapes: q, k, a, b: [B, T, H, d_k]; v: [B, T, H, d_v]; log_w: [B, T, H, d_k or 1]; o: [B, T, H, d_v].

Chunkwise form (`dplr`; a chunk of L steps entering with state S_0, c_t = Σ_{r<=t} log w_r within it):
the state's read u_t = S_{t-1}^T a_t is the only term that needs the state, and
    u_t = (e^{c_{t-1}} ⊙ a_t)^T S_0 + Σ_{s<t} [a_t ⊙ e^{c_{t-1}-c_s}] · (k_s v_s + b_s u_s)      (row vectors)
is a unit lower-triangular system in the rows of U: (I - A_ab) U = Ã S_0 + A_ak V, where
A_xy[t, s] = Σ_i x_ti e^{c_{t-1,i} - c_{s,i}} y_si for s < t. Then
    o_t = (e^{c_t} ⊙ q_t)^T S_0 + Σ_{s<=t} Σ_i q_ti e^{c_ti - c_si} (k_si v_s + b_si u_s)
    S_L = e^{c_L} ⊙ S_0 + Σ_s e^{c_L - c_s} ⊙ (k_s v_s^T + b_s u_s^T)
With a decay per key dimension the pairwise sums A_xy factor as a matrix product, (x_t ⊙ e^{c_{t-1}}) ·
(y_s ⊙ e^{-c_s}) (`_pairing`), where every chunk's decay stays above e^{-FACTORED_SPAN}: its exponents then
stay within ±FACTORED_SPAN, in range in float32. Where a chunk decays faster (and with one decay per head, where
they are matrix products scaled by e^{c_t - c_s}) they are summed from the pairwise differences, every exponent
<= 0: nothing overflows whatever the decay.
`dplr_loop` is the plain per-step loop the chunkwise form is tested against; the state forms below serve
the `state` site (`mixers.dplr.DPLRState`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mecheval.models.ops.chunks import chunk_grid, into_chunks


class DPLRInputs(NamedTuple):
    """The recurrence's inputs over steps: q, k [B, T, H, d_k]; v [B, T, H, d_v]; log_w [B, T, H, d_k or 1];
    a, b [B, T, H, d_k] or both None (no low-rank term)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    log_w: torch.Tensor
    a: torch.Tensor | None
    b: torch.Tensor | None


def dplr_transition(S, log_w_t, a_t, b_t):
    """(diag(w_t) + b_t a_t^T) S: S [B, H, d_k, d_v]; log_w_t [B, H, d_k or 1]; a_t, b_t [B, H, d_k] or None."""
    moved = log_w_t.exp()[..., None] * S
    if a_t is None:
        return moved
    return torch.addcmul(moved, b_t[..., :, None], torch.einsum("bhk,bhkv->bhv", a_t, S)[..., None, :])


def dplr_next(S, k_t, v_t, log_w_t, a_t, b_t):
    """S_t = (diag(w_t) + b_t a_t^T) S_{t-1} + k_t v_t^T: S [B, H, d_k, d_v]; the step inputs as in `dplr_step`."""
    return dplr_transition(S, log_w_t, a_t, b_t) + k_t[..., :, None] * v_t[..., None, :]


def dplr_step(q_t, k_t, v_t, log_w_t, a_t, b_t, S):
    """One step: the step inputs as `DPLRInputs` without T; S [B, H, d_k, d_v] -> (o_t [B, H, d_v], S_t)."""
    S = dplr_next(S, k_t, v_t, log_w_t, a_t, b_t)
    return torch.einsum("bhkv,bhk->bhv", S, q_t), S


def _at(x: torch.Tensor | None, t: int) -> torch.Tensor | None:
    return None if x is None else x[:, t]


def dplr_run(inputs: DPLRInputs, S: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The steps of `inputs` one by one from state S [B, H, d_k, d_v] -> (o [B, T, H, d_v], the last state)."""
    outs = []
    for t in range(inputs.q.shape[1]):
        o, S = dplr_step(*(_at(x, t) for x in inputs), S)
        outs.append(o)
    return torch.stack(outs, dim=1), S


def dplr_loop(q, k, v, log_w, a=None, b=None):
    """Plain per-step loop from S = 0 (the reference): -> o [B, T, H, d_v]."""
    S = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[-1])
    return dplr_run(DPLRInputs(q, k, v, log_w, a, b), S)[0]


def _pairs(x, decay, y):
    """Σ_i x_ti decay_tsi y_si: x, y [..., L, d_k]; decay [..., L, L, d_k or 1] -> [..., L, L]."""
    if decay.shape[-1] == 1:  # one decay per head: a matrix product, scaled
        return (x @ y.transpose(-1, -2)) * decay[..., 0]
    return (x[..., :, None, :] * decay * y[..., None, :, :]).sum(-1)  # (2.5x faster than einsum's path on CPU)


# The largest exponent the factored pairwise terms take (e^30 ~ 1e13; float32 holds up to ~3e38)
FACTORED_SPAN = 30.0


def _pairing(x, x_in, cx, c, inv, mask):
    """A function of y (given as y ⊙ inv where factored, y itself otherwise) -> A[t, s] = Σ_i x_ti e^{cx_ti - c_si}
    y_si where mask[t, s], else 0: x, y [..., L, d_k]; x_in = x ⊙ e^{cx}; cx, c [..., L, d_k or 1]; mask [L, L]
    -> [..., L, L]. inv = e^{-c} (factored): the matrix product x_in (y ⊙ inv)^T (exponents up to the chunk's
    decay, `FACTORED_SPAN` at most); None: from the differences cx_t - c_s, every exponent <= 0."""
    if inv is not None:
        return lambda y_out: (x_in @ y_out.transpose(-1, -2)).masked_fill(~mask, 0)
    decay = torch.where(mask[..., None], cx[..., :, None, :] - c[..., None, :, :], -torch.inf).exp()
    return lambda y: _pairs(x, decay, y)


def chunk_length(log_w: torch.Tensor) -> int:
    """The chunk length `dplr` takes by default: 32, but 8 where the decay is per key dimension and a chunk of 32
    steps decays beyond e^{-FACTORED_SPAN} (the pairwise terms do not factor: each is an [L, L, d_k] tensor per
    chunk, and at L = 32 they leave the cache: the op ran 1.6-7x slower than at 8). Factored, at 32, the op forward
    and backward ran 2.7-3.7x faster than unfactored at 8 (GLA's and RWKV-7's shapes, `benchmarks/dplr_chunks.py`)."""
    return 8 if log_w.shape[-1] > 1 and not _factors(log_w, 32) else 32


def _factors(log_w: torch.Tensor, L: int) -> bool:
    """Every chunk of L steps of log_w [B, T, H, X] decays within e^{-FACTORED_SPAN}."""
    nc, L = chunk_grid(log_w.shape[1], L)
    return _within_span(into_chunks(log_w, nc, L).sum(2))


def _within_span(decay: torch.Tensor) -> bool:
    """Every log decay in `decay` lies above -FACTORED_SPAN. False under torch.func.vmap (a cohort's stacked
    members), where no tensor's value may steer the computation: the unfactored form serves any decay."""
    try:
        return bool(decay.min() > -FACTORED_SPAN)
    except RuntimeError:  # vmap: data-dependent control flow
        return False


def dplr(q, k, v, log_w, a=None, b=None, chunk_size: int | None = None, initial: torch.Tensor | None = None):
    """Chunkwise DPLR recurrence (module docstring) from S_0 = `initial` [B, H, d_k, d_v] (None: 0): -> o [B, T,
    H, d_v]. All chunks' pairwise terms and triangular solves at once, then T / L steps carrying the state across
    chunks (chunks of at most `chunk_size`; None: `chunk_length(log_w)`, the grid `chunk_grid(T, chunk_size)`).
    q None: the state entering each chunk alone, no output computed -> S [B, nc, H, d_k, d_v]; k, v None: nothing
    written (what `initial` alone becomes)."""
    if chunk_size is None:
        chunk_size = chunk_length(log_w)
    Bsz, T, H = log_w.shape[:3]
    S = initial if initial is not None else k.new_zeros(Bsz, H, k.shape[-1], v.shape[-1])
    dk, dv = S.shape[-2:]
    nc, L = chunk_grid(T, chunk_size)  # padded steps: log w = 0 and nothing written, so the state passes unchanged

    def chunks(x):  # [B, T, H, X] -> [B, H, nc, L, X]
        return None if x is None else into_chunks(x, nc, L).permute(0, 3, 1, 2, 4)

    q, k, v, log_w, a, b = (chunks(x) for x in (q, k, v, log_w, a, b))
    writes = k is not None
    c = log_w.cumsum(-2)  # [B, H, nc, L, d_k or 1]
    # with a decay per key dimension, factored where the chunks allow (c falls within a chunk: its last step holds
    # the chunk's decay); one per head: the pairwise terms are matrix products already (factoring them ran slower)
    factored = log_w.shape[-1] > 1 and _within_span(c)
    inv = (-c).exp() if factored else None  # e^{-c_s}: the written side of a factored pairwise term

    def out(y):  # y as the pairing reads it: y ⊙ e^{-c} where factored
        return y if inv is None or y is None else y * inv

    k_out, b_out = out(k), out(b)
    steps = torch.arange(L, device=log_w.device)
    if q is not None:
        q_in = q * c.exp()  # reads S_0
        pair_q = _pairing(q, q_in, c, c, inv, steps[None] <= steps[:, None])  # e^{c_t - c_s}, s <= t
        o_local = pair_q(k_out) @ v if writes else 0  # [B, H, nc, L, d_v]
    if a is not None:
        c_before = c - log_w  # c_{t-1}
        a_in = a * c_before.exp()  # e^{c_{t-1}} ⊙ a_t
        pair_a = _pairing(a, a_in, c_before, c, inv, steps[None] < steps[:, None])  # e^{c_{t-1} - c_s}, s < t
        solve = torch.eye(L, dtype=S.dtype, device=S.device) - pair_a(b_out)  # I - A_ab
        rhs = torch.cat([a_in, pair_a(k_out) @ v], -1) if writes else a_in
        WR = torch.linalg.solve_triangular(solve, rhs, upper=False, unitriangular=True)
        W, R = WR.split([dk, dv], dim=-1) if writes else (WR, None)  # U = W S_0 + R
        if q is not None:
            qb = pair_q(b_out)  # [B, H, nc, L, L]
    to_end = (c[..., -1:, :] - c).exp()  # e^{c_L - c_s}  [B, H, nc, L, d_k or 1]
    outs, starts = [], []
    for i in range(nc):
        starts.append(S)
        write = (k[:, :, i] * to_end[:, :, i]).transpose(-1, -2) @ v[:, :, i] if writes else 0
        if a is not None:
            U = W[:, :, i] @ S + (R[:, :, i] if writes else 0)  # the reads u_t  [B, H, L, d_v]
            write = write + (b[:, :, i] * to_end[:, :, i]).transpose(-1, -2) @ U
        if q is not None:
            o = q_in[:, :, i] @ S + (o_local[:, :, i] if writes else 0)
            outs.append(o if a is None else o + qb[:, :, i] @ U)
        S = c[:, :, i, -1].exp()[..., None] * S + write
    if q is None:
        return torch.stack(starts, dim=1)
    o = torch.stack(outs, dim=2)  # [B, H, nc, L, d_v]
    return o.permute(0, 2, 3, 1, 4).reshape(Bsz, nc * L, H, dv)[:, :T]


def dplr_states(k, v, log_w, a=None, b=None):
    """The state after every t, by the recurrence: -> S [n, T, H, d_k, d_v]. (unbind: one backward node per
    input, not T.)"""
    S, states = k.new_zeros(k.shape[0], k.shape[2], k.shape[3], v.shape[-1]), []
    per_step = [x.unbind(1) if x is not None else [None] * k.shape[1] for x in (k, v, log_w, a, b)]
    for k_t, v_t, log_w_t, a_t, b_t in zip(*per_step):
        S = dplr_next(S, k_t, v_t, log_w_t, a_t, b_t)
        states.append(S)
    return torch.stack(states, dim=1)


def dplr_states_response(q, log_w, a, b, dS):
    """The change of o when the state after every t moves by dS[:, t] [n, T, H, d_k, d_v] at once: with
    g_s = M_s g_{s-1} + dS_s, M_s = diag(w_s) + b_s a_s^T (the moves carried forward, nothing written),
    Δo_s = (M_s g_{s-1})^T q_s, Δo_0 = 0 -> [n, T, H, d_v]."""
    moves = dS.unbind(1)
    g, out = moves[0], [dS.new_zeros(dS.shape[0], dS.shape[2], dS.shape[4])]
    per_step = [x.unbind(1)[1:] if x is not None else [None] * (q.shape[1] - 1) for x in (q, log_w, a, b)]
    for q_s, log_w_s, a_s, b_s, dS_s in zip(*per_step, moves[1:]):
        moved = dplr_transition(g, log_w_s, a_s, b_s)
        out.append(torch.einsum("bhkv,bhk->bhv", moved, q_s))
        g = moved + dS_s
    return torch.stack(out, dim=1)


def dplr_patch_response(q, log_w, a, b, dS, step, chunkwise: bool | None = None):
    """The change of o when the state after step[r] (one step per row, step [n]) moves by dS [n, H, d_k, d_v]:
    Δo_s = g_s^T q_s for s > step with g = dS carried forward and nothing written, 0 up to it -> [n, T, H, d_v].
    chunkwise: each row's steps after its own shifted to start at 0 (past T: w = 1, a = b = q = 0) and run by the
    chunkwise form from dS, all rows at once; else stepped from the earliest patched step, each row's dS joining
    the carried move at its step. None: chunkwise where the decay is one per head (log_w [..., 1]: 1.6-2x the
    stepping), stepping where it is one per key dimension (the chunkwise form's pairwise terms: 5-7x slower).
    Against stepping a [n, T, ...] tensor of moves (the way before 2026-12-07): 7.5-7.9x and 2.8-3.1x, one
    thread, 512 rows, 90-180 steps (benchmarks/state_patch.py)."""
    n, T = q.shape[:2]
    out = dS.new_zeros(n, T, q.shape[2], dS.shape[-1])
    first = int(step.min())
    if first == T - 1:  # every row patched at the last step: no step after it
        return out
    if not (log_w.shape[-1] == 1 if chunkwise is None else chunkwise):
        g = torch.zeros_like(dS)  # the move carried to step s; each row's dS joins it at its own step
        for s in range(first, T):
            joins = (step == s).nonzero()[:, 0]
            if s > first:
                g = dplr_transition(g, log_w[:, s], _at(a, s), _at(b, s))
            g.index_add_(0, joins, dS[joins])  # in place: the step's fresh state, which no op has saved
            if s > first:
                out[:, s] = torch.einsum("bhkv,bhk->bhv", g, q[:, s])
                out[joins, s] = 0  # a row joining at s had moved nothing before it
        return out
    src = step[:, None] + 1 + torch.arange(T - 1 - first, device=q.device)  # [n, span]
    inside, rows = src < T, torch.arange(n, device=q.device)[:, None].expand_as(src)
    at = src.clamp(max=T - 1)

    def shifted(x):  # [n, T, H, X] -> [n, span, H, X], zero past T
        return None if x is None else torch.where(inside[..., None, None], x[rows, at], 0)

    o = dplr(shifted(q), None, None, shifted(log_w), shifted(a), shifted(b), initial=dS)
    out[rows[inside], src[inside]] = o[inside]
    return out


def state_at_chunk(log_w: torch.Tensor) -> int:
    """`dplr_state_at`'s chunk length (benchmarks/state_patch.py, one thread, 256 rows, 90-180 steps, against
    stepping from 0): 8 with one decay per head (5.1-7.8x; 4: 3.9-5.1x, 16: 5.4-7.3x); with one per key dimension
    16 where its pairwise terms factor (4.4-6.8x; 4: 3.2-3.8x, 8: 4.1-4.2x), else 4 (1.9x unfactored; 8: 1.2-1.6x)."""
    if log_w.shape[-1] == 1:
        return 8
    return 16 if _factors(log_w, 16) else 4


def dplr_state_at(k, v, log_w, a, b, pos, chunk_size: int | None = None):
    """The state after step pos (one per row): pos [n] -> S [n, H, d_k, d_v]. The chunkwise form's state entering
    the chunk that holds pos, then that chunk's steps up to pos, all rows at once (each stops at its own pos): at
    most `chunk_size` (None: `state_at_chunk(log_w)`) steps after the chunked pass, where stepping from 0 took
    pos + 1."""
    chunk_size = chunk_size or state_at_chunk(log_w)
    upto = int(pos.max()) + 1
    k, v, log_w, a, b = (None if x is None else x[:, :upto] for x in (k, v, log_w, a, b))
    entering = dplr(None, k, v, log_w, a, b, chunk_size=chunk_size)  # [n, nc, H, d_k, d_v]
    L = chunk_grid(upto, chunk_size)[1]
    rows, chunk = torch.arange(len(pos)), pos // L
    first, S = chunk * L, entering[rows, chunk]  # each row's chunk starts at step `first`
    for j in range(L):
        t = (first + j).clamp(max=upto - 1)
        stepped = dplr_next(S, *(None if x is None else x[rows, t] for x in (k, v, log_w, a, b)))
        S = torch.where((first + j <= pos)[:, None, None, None], stepped, S)
    return S
