"""Fused CPU delta rule (numba): the recurrence of `delta_rule_loop`, one (batch, head) per work item.

    e_t = v_t - S_{t-1}^T k_t,   u_t = β_t e_t,   S_t = S_{t-1} + k_t u_t^T,   o_t = S_t^T q_t

Shapes: q, k: [B, T, H, d_k]; v, o: [B, T, H, d_v]; beta: [B, T, H]; S: [d_k, d_v] per item.
Forward: two passes over S per step (S^T k; then the update with S^T q), keeping e_t and the state
entering every chunk of TC steps. Backward: per chunk, the states are recomputed from its entry state
(S_t = S_{t-1} + k_t u_t^T), then a reverse pass carries G = ∂L/∂S_t:

    G += q_t do_t^T;   ∂q_t = S_t do_t;   ∂u_t = G^T k_t;   ∂k_t = G u_t - S_{t-1} g_t   (g_t = β_t ∂u_t)
    ∂v_t = g_t;   ∂β_t = ∂u_t · e_t;   G <- G - k_t g_t^T   (∂L/∂S_{t-1})

in one pass over the rows of G and S_{t-1} per step: the last two updates of step t and the first four
of step t - 1 read the same rows (S_t of step t - 1 is S_{t-1}).
Rows of S and G are contiguous in d_v, so every pass is a vectorised loop over d_v; the dot products
over d_v (∂q, ∂k) may be reassociated (fastmath "reassoc" only), so sums differ from a strict order
in the last bits. CPU, float32 or float64.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from mecheval.models.ops.numba_kernels import as_numpy, parallel_kernel, use_torch_threads

TC = 16  # time steps per chunk: the backward recomputes a chunk's TC states into scratch
FLAGS = {"reassoc"}


@parallel_kernel(fastmath=FLAGS)
def _delta_fwd(q, k, v, beta, o, e, S_in):  # pragma: no cover - compiled
    """o, e: [B, T, H, d_v] outputs; S_in: [B, H, ceil(T / TC), d_k, d_v], the state entering each chunk."""
    Bsz, T, H, dk = k.shape
    dv = v.shape[-1]
    for item in prange(Bsz * H):
        b, h = item // H, item % H
        S = np.zeros((dk, dv), q.dtype)
        u = np.empty(dv, q.dtype)
        for t in range(T):
            if t % TC == 0:
                S_in[b, h, t // TC] = S
            kt, qt, et, ot = k[b, t, h], q[b, t, h], e[b, t, h], o[b, t, h]
            et[:] = v[b, t, h]
            for i in range(dk):  # e = v - S^T k
                Si, ki = S[i], kt[i]
                for j in range(dv):
                    et[j] -= Si[j] * ki
            bt = beta[b, t, h]
            for j in range(dv):
                u[j] = bt * et[j]
            ot[:] = 0
            for i in range(dk):  # S += k u^T, o = S^T q
                Si, ki, qi = S[i], kt[i], qt[i]
                for j in range(dv):
                    Si[j] += ki * u[j]
                    ot[j] += Si[j] * qi


@njit(cache=True, fastmath=FLAGS)
def _chunk_states(k, beta, e, S_in, b, h, c, Ss):  # pragma: no cover - compiled
    """Ss[s] = the state entering step c TC + s of item (b, h), s = 0 .. steps in chunk c, from S_in."""
    T, dk, dv = k.shape[1], k.shape[3], e.shape[3]
    t0 = c * TC
    Ss[0] = S_in[b, h, c]
    for t in range(t0, min(T, t0 + TC)):
        s, kt, bt, et = t - t0, k[b, t, h], beta[b, t, h], e[b, t, h]
        for i in range(dk):
            Sp, Sn, ki = Ss[s, i], Ss[s + 1, i], kt[i] * bt
            for j in range(dv):
                Sn[j] = Sp[j] + ki * et[j]


@parallel_kernel(fastmath=FLAGS)
def _delta_bwd(q, k, beta, e, S_in, do, dq, dk_, dv_, dbeta):  # pragma: no cover - compiled
    """dq, dk_: [B, T, H, d_k]; dv_: [B, T, H, d_v]; dbeta: [B, T, H] outputs. One sweep over the rows of
    G and S_{t-1} per step: it finishes step t (needs g_t) and begins step t - 1 (the same S_{t-1})."""
    Bsz, T, H, dk = k.shape
    dv = e.shape[-1]
    zero = q.dtype.type(0)
    for item in prange(Bsz * H):
        b, h = item // H, item % H
        G = np.zeros((dk, dv), q.dtype)  # ∂L/∂S_t
        Ss = np.empty((TC + 1, dk, dv), q.dtype)  # the chunk's states: Ss[s] enters step t0 + s
        u, du, g = np.empty(dv, q.dtype), np.zeros(dv, q.dtype), np.empty(dv, q.dtype)
        last = S_in.shape[2] - 1
        _chunk_states(k, beta, e, S_in, b, h, last, Ss)
        qt, kt, bt, et, dout, St = q[b, T - 1, h], k[b, T - 1, h], beta[b, T - 1, h], e[b, T - 1, h], do[b, T - 1, h], Ss[T - last * TC]
        for j in range(dv):
            u[j] = bt * et[j]
        for i in range(dk):  # begin step T - 1: G += q do^T; ∂q = S_t do; ∂u = G^T k; ∂k = G u
            Gi, Si, qi, ki = G[i], St[i], qt[i], kt[i]
            aq, ak = zero, zero
            for j in range(dv):
                aq += Si[j] * dout[j]
                Gi[j] += qi * dout[j]
                du[j] += Gi[j] * ki
                ak += Gi[j] * u[j]
            dq[b, T - 1, h, i], dk_[b, T - 1, h, i] = aq, ak
        for t in range(T - 1, -1, -1):
            c = t // TC
            if t % TC == TC - 1 and c != last:
                _chunk_states(k, beta, e, S_in, b, h, c, Ss)
            kt, bt, et, dkt, gt = k[b, t, h], beta[b, t, h], e[b, t, h], dk_[b, t, h], dv_[b, t, h]
            ab = zero
            for j in range(dv):  # ∂β = ∂u · e; ∂v = g = β ∂u
                ab += du[j] * et[j]
                g[j] = bt * du[j]
            dbeta[b, t, h] = ab
            gt[:] = g
            du[:] = 0
            Sp = Ss[t - c * TC]  # S_{t-1}
            if t == 0:
                continue  # S_{-1} = 0: nothing left to finish
            qp, kp, bp, ep, dp, dqp, dkp = q[b, t - 1, h], k[b, t - 1, h], beta[b, t - 1, h], e[b, t - 1, h], do[b, t - 1, h], dq[b, t - 1, h], dk_[b, t - 1, h]
            for j in range(dv):
                u[j] = bp * ep[j]  # u_{t-1}
            for i in range(dk):
                Gi, Si, ki, qi, kpi = G[i], Sp[i], kt[i], qp[i], kp[i]
                a, aq, ak = zero, zero, zero
                for j in range(dv):
                    a += Si[j] * g[j]  # finish t: ∂k_t -= S_{t-1} g; G <- G - k g^T
                    Gi[j] += qi * dp[j] - ki * g[j]  # begin t - 1 with S_{t-1} and the updated G
                    aq += Si[j] * dp[j]
                    du[j] += Gi[j] * kpi
                    ak += Gi[j] * u[j]
                dkt[i] -= a
                dqp[i], dkp[i] = aq, ak


class DeltaRuleFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, beta):
        use_torch_threads()
        q, k, v, beta = (x.contiguous() for x in (q, k, v, beta))
        (Bsz, T, H, dk), dv = k.shape, v.shape[-1]
        o, e = v.new_empty(v.shape), v.new_empty(v.shape)
        S_in = v.new_empty(Bsz, H, -(-T // TC), dk, dv)
        _delta_fwd(as_numpy(q), as_numpy(k), as_numpy(v), as_numpy(beta), o.numpy(), e.numpy(), S_in.numpy())
        ctx.save_for_backward(q, k, beta, e, S_in)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, beta, e, S_in = ctx.saved_tensors
        use_torch_threads()
        dq, dk, dv, dbeta = torch.empty_like(q), torch.empty_like(k), torch.empty_like(e), torch.empty_like(beta)
        _delta_bwd(as_numpy(q), as_numpy(k), as_numpy(beta), as_numpy(e), as_numpy(S_in), as_numpy(do),
                   dq.numpy(), dk.numpy(), dv.numpy(), dbeta.numpy())
        return dq, dk, dv, dbeta


def delta_rule_fused(q, k, v, beta):
    """Same signature and result as `delta_rule_loop`: q, k [B, T, H, d_k]; v [B, T, H, d_v]; beta
    [B, T, H], all on CPU in one dtype (float32 or float64) -> o [B, T, H, d_v]."""
    return DeltaRuleFn.apply(q, k, v, beta)
