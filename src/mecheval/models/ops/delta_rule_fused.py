"""Fused CPU delta rule (numba): the recurrence of `delta_rule_loop`, one (batch, head) per work item.

    e_t = v_t - S_{t-1}^T k_t,   u_t = β_t e_t,   S_t = S_{t-1} + k_t u_t^T,   o_t = S_t^T q_t

Shapes: q, k: [B, T, H, d_k]; v, o: [B, T, H, d_v]; beta: [B, T, H]; S: [d_k, d_v] per item.
Forward: two passes over S per step (S^T k; then the update with S^T q), keeping e_t and the state
entering every chunk of TC steps. Backward: per chunk, the states are recomputed from its entry state
(S_t = S_{t-1} + k_t u_t^T), then a reverse pass carries G = ∂L/∂S_t:

    G += q_t do_t^T;   ∂q_t = S_t do_t;   ∂u_t = G^T k_t;   ∂k_t = G u_t - S_{t-1} g_t   (g_t = β_t ∂u_t)
    ∂v_t = g_t;   ∂β_t = ∂u_t · e_t;   G <- G - k_t g_t^T   (∂L/∂S_{t-1})

Rows of S and G are contiguous in d_v, so every pass is a vectorised loop over d_v; the dot products
over d_v (∂q, ∂k) may be reassociated (fastmath "reassoc" only), so sums differ from a strict order
in the last bits. CPU, float32 or float64.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import prange

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


@parallel_kernel(fastmath=FLAGS)
def _delta_bwd(q, k, beta, e, S_in, do, dq, dk_, dv_, dbeta):  # pragma: no cover - compiled
    """dq, dk_: [B, T, H, d_k]; dv_: [B, T, H, d_v]; dbeta: [B, T, H] outputs."""
    Bsz, T, H, dk = k.shape
    dv = e.shape[-1]
    zero = q.dtype.type(0)
    for item in prange(Bsz * H):
        b, h = item // H, item % H
        G = np.zeros((dk, dv), q.dtype)  # ∂L/∂S_t
        Ss = np.empty((TC + 1, dk, dv), q.dtype)  # the chunk's states: Ss[s] enters step t0 + s
        u, du = np.empty(dv, q.dtype), np.empty(dv, q.dtype)
        for c in range(S_in.shape[2] - 1, -1, -1):
            t0, t1 = c * TC, min(T, (c + 1) * TC)
            Ss[0] = S_in[b, h, c]
            for t in range(t0, t1):
                s, kt, bt, et = t - t0, k[b, t, h], beta[b, t, h], e[b, t, h]
                for j in range(dv):
                    u[j] = bt * et[j]
                for i in range(dk):
                    Sp, Sn, ki = Ss[s, i], Ss[s + 1, i], kt[i]
                    for j in range(dv):
                        Sn[j] = Sp[j] + ki * u[j]
            for t in range(t1 - 1, t0 - 1, -1):
                s, qt, kt, bt, et, dout = t - t0, q[b, t, h], k[b, t, h], beta[b, t, h], e[b, t, h], do[b, t, h]
                dqt, dkt, gt = dq[b, t, h], dk_[b, t, h], dv_[b, t, h]
                for j in range(dv):
                    u[j] = bt * et[j]
                du[:] = 0
                for i in range(dk):  # G += q do^T; ∂q = S_t do; ∂u = G^T k; ∂k = G u
                    Gi, Si, qi, ki = G[i], Ss[s + 1, i], qt[i], kt[i]
                    aq, ak = zero, zero
                    for j in range(dv):
                        aq += Si[j] * dout[j]
                        Gi[j] += qi * dout[j]
                        du[j] += Gi[j] * ki
                        ak += Gi[j] * u[j]
                    dqt[i], dkt[i] = aq, ak
                ab = zero
                for j in range(dv):  # ∂β = ∂u · e; ∂v = g = β ∂u
                    ab += du[j] * et[j]
                    gt[j] = bt * du[j]
                dbeta[b, t, h] = ab
                for i in range(dk):  # ∂k -= S_{t-1} g; G <- G - k g^T
                    Gi, Si, ki = G[i], Ss[s, i], kt[i]
                    a = zero
                    for j in range(dv):
                        a += Si[j] * gt[j]
                        Gi[j] -= ki * gt[j]
                    dkt[i] -= a


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
