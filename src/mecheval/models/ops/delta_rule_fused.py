"""Fused CPU delta rule (numba): the recurrence of `delta_rule_loop`, one (batch, head) per work item.

    e_t = v_t - S_{t-1}^T k_t,   u_t = β_t e_t,   S_t = S_{t-1} + k_t u_t^T,   o_t = S_t^T q_t

Shapes: q, k: [B, T, H, d_k]; v, o: [B, T, H, d_v]; beta: [B, T, H]; S: [d_k, d_v] per item.
Forward: one pass over the rows of S per step (S += k_t u_t^T, o_t = S^T q_t and, for the next step,
S^T k_{t+1}), keeping e_t and the state after every chunk of TC steps. Backward: a reverse pass carries
G = ∂L/∂S_t:

    G += q_t do_t^T;   ∂q_t = S_t do_t;   ∂u_t = G^T k_t;   ∂k_t = G u_t - S_{t-1} g_t   (g_t = β_t ∂u_t)
    ∂v_t = g_t;   ∂β_t = ∂u_t · e_t;   G <- G - k_t g_t^T   (∂L/∂S_{t-1})

in one sweep over the rows of G and S per step, which first walks S back, S_{t-1} = S_t - k_t u_t^T
(the saved state instead when step t starts a chunk, so rounding drifts over < TC steps): the last two
updates of step t and the first four of step t - 1 read the same rows (S_t of step t - 1 is S_{t-1}).
Rows of S and G are contiguous in d_v, so every pass is a vectorised loop over d_v, on two (backward)
or four (forward) rows at once so that the [d_v] accumulators (o, e, ∂u) go through memory once per
group. Sums may be reassociated and multiply-adds fused (fastmath "reassoc", "contract"), so results
differ from a strict order in the last bits. CPU, float32 or float64.

Same inputs, same bits: no loop both sums and stores. LLVM guards a vectorised loop that stores by a run-time
check that its arrays lie far enough apart, else runs it scalar, and a scalar sum adds in another order than
a vector one: the backward's scratch rows, allocated afresh each call, sometimes lay within a few vectors of
each other, and ∂β differed in its last bits from call to call (a DeltaNet run from one training to the next).
The backward therefore updates a pair of rows in one loop and sums over them, still in cache, in the next.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from mecheval.models.ops.numba_kernels import as_numpy, parallel_kernel, use_torch_threads

TC = 16  # time steps per chunk: the forward keeps the state after each; the backward walks back from it
FLAGS = {"reassoc", "contract"}


@njit(cache=True, fastmath=FLAGS)
def _update_rows(S, kt, u, qt, ot, kn, en):  # pragma: no cover - compiled
    """S += k u^T, then o += S^T q and e' -= S^T k' (o, e' [d_v] accumulate), rows four at a time: one
    pass over S, accumulators loaded and stored once per four rows."""
    dk, dv = S.shape
    i = 0
    while i + 3 < dk:
        S0, S1, S2, S3 = S[i], S[i + 1], S[i + 2], S[i + 3]
        k0, k1, k2, k3 = kt[i], kt[i + 1], kt[i + 2], kt[i + 3]
        q0, q1, q2, q3 = qt[i], qt[i + 1], qt[i + 2], qt[i + 3]
        n0, n1, n2, n3 = kn[i], kn[i + 1], kn[i + 2], kn[i + 3]
        for j in range(dv):
            s0, s1, s2, s3 = S0[j] + k0 * u[j], S1[j] + k1 * u[j], S2[j] + k2 * u[j], S3[j] + k3 * u[j]
            S0[j], S1[j], S2[j], S3[j] = s0, s1, s2, s3
            ot[j] += (s0 * q0 + s1 * q1) + (s2 * q2 + s3 * q3)
            en[j] -= (s0 * n0 + s1 * n1) + (s2 * n2 + s3 * n3)
        i += 4
    for i in range(i, dk):
        Si, ki, qi, ni = S[i], kt[i], qt[i], kn[i]
        for j in range(dv):
            s = Si[j] + ki * u[j]
            Si[j] = s
            ot[j] += s * qi
            en[j] -= s * ni


@parallel_kernel(fastmath=FLAGS)
def _delta_fwd(q, k, v, beta, o, e, S_end):  # pragma: no cover - compiled
    """o, e: [B, T, H, d_v] outputs; S_end: [B, H, ceil(T / TC), d_k, d_v], the state after each chunk.
    One pass over S per step: S_t = S_{t-1} + k_t u_t^T, o_t = S_t^T q_t and e_{t+1} = v_{t+1} - S_t^T k_{t+1}."""
    Bsz, T, H, dk = k.shape
    dv = v.shape[-1]
    for item in prange(Bsz * H):
        b, h = item // H, item % H
        S = np.zeros((dk, dv), q.dtype)
        u, spare = np.empty(dv, q.dtype), np.empty(dv, q.dtype)
        e[b, 0, h] = v[b, 0, h]  # S_{-1} = 0
        for t in range(T):
            bt, et, ot = beta[b, t, h], e[b, t, h], o[b, t, h]
            for j in range(dv):
                u[j] = bt * et[j]
            ot[:] = 0
            if t + 1 < T:
                kn, en = k[b, t + 1, h], e[b, t + 1, h]
                en[:] = v[b, t + 1, h]
            else:
                kn, en = k[b, t, h], spare  # no e_T: accumulate into scratch
            _update_rows(S, k[b, t, h], u, q[b, t, h], ot, kn, en)
            if t % TC == TC - 1 or t == T - 1:
                S_end[b, h, t // TC] = S


@parallel_kernel(fastmath=FLAGS)
def _delta_bwd(q, k, beta, e, S_end, do, dq, dk_, dv_, dbeta):  # pragma: no cover - compiled
    """dq, dk_: [B, T, H, d_k]; dv_: [B, T, H, d_v]; dbeta: [B, T, H] outputs. One sweep over the rows of
    S and G per step t: S_{t-1} = S_t - k_t u_t^T (or, entering a chunk, its saved state), then the end
    of step t and the beginning of step t - 1 (which use the same S_{t-1})."""
    Bsz, T, H, dk = k.shape
    dv = e.shape[-1]
    zero = q.dtype.type(0)
    for item in prange(Bsz * H):
        b, h = item // H, item % H
        G = np.zeros((dk, dv), q.dtype)  # ∂L/∂S_t
        S = S_end[b, h, -1].copy()  # S_t, walked back one step per sweep
        u, up, du, g = np.empty(dv, q.dtype), np.empty(dv, q.dtype), np.zeros(dv, q.dtype), np.empty(dv, q.dtype)
        no_k = np.zeros(dk, q.dtype)
        qt, kt, bt, et, dout = q[b, T - 1, h], k[b, T - 1, h], beta[b, T - 1, h], e[b, T - 1, h], do[b, T - 1, h]
        for j in range(dv):
            u[j] = bt * et[j]
        for i in range(dk):  # begin step T - 1: G += q do^T; ∂q = S_t do; ∂u = G^T k; ∂k = G u
            Gi, Si, qi, ki = G[i], S[i], qt[i], kt[i]
            for j in range(dv):
                Gi[j] += qi * dout[j]
                du[j] += Gi[j] * ki
            aq, ak = zero, zero
            for j in range(dv):  # the sums in a loop of their own (see the module's docstring)
                aq += Si[j] * dout[j]
                ak += Gi[j] * u[j]
            dq[b, T - 1, h, i], dk_[b, T - 1, h, i] = aq, ak
        for t in range(T - 1, -1, -1):  # u holds u_t, du holds ∂u_t
            kt, bt, et, dkt, gt = k[b, t, h], beta[b, t, h], e[b, t, h], dk_[b, t, h], dv_[b, t, h]
            ab = zero
            for j in range(dv):  # ∂β = ∂u · e
                ab += du[j] * et[j]
            for j in range(dv):  # ∂v = g = β ∂u
                g[j] = bt * du[j]
            dbeta[b, t, h] = ab
            gt[:] = g
            du[:] = 0
            if t == 0:
                break  # S_{-1} = 0: nothing left to finish
            if t % TC == 0:  # S_{t-1}: the state after chunk t / TC - 1, saved
                S[:] = S_end[b, h, t // TC - 1]
                kr = no_k
            else:  # S_{t-1} = S_t - k_t u_t^T
                kr = kt
            qp, kp, bp, ep, dp, dqp, dkp = q[b, t - 1, h], k[b, t - 1, h], beta[b, t - 1, h], e[b, t - 1, h], do[b, t - 1, h], dq[b, t - 1, h], dk_[b, t - 1, h]
            for j in range(dv):
                up[j] = bp * ep[j]  # u_{t-1}
            i = 0
            while i + 1 < dk:  # the loop below on two rows at once: ∂u goes through memory once per pair
                G0, G1, S0, S1 = G[i], G[i + 1], S[i], S[i + 1]
                k0, k1, r0, r1, q0, q1, p0, p1 = kt[i], kt[i + 1], kr[i], kr[i + 1], qp[i], qp[i + 1], kp[i], kp[i + 1]
                for j in range(dv):
                    S0[j] -= r0 * u[j]
                    S1[j] -= r1 * u[j]
                    h0, h1 = G0[j] + (q0 * dp[j] - k0 * g[j]), G1[j] + (q1 * dp[j] - k1 * g[j])
                    G0[j], G1[j] = h0, h1
                    du[j] += h0 * p0 + h1 * p1
                a0, a1, aq0, aq1, ak0, ak1 = zero, zero, zero, zero, zero, zero
                for j in range(dv):  # the sums over the updated rows
                    a0 += S0[j] * g[j]
                    a1 += S1[j] * g[j]
                    aq0 += S0[j] * dp[j]
                    aq1 += S1[j] * dp[j]
                    ak0 += G0[j] * up[j]
                    ak1 += G1[j] * up[j]
                dkt[i] -= a0
                dkt[i + 1] -= a1
                dqp[i], dkp[i], dqp[i + 1], dkp[i + 1] = aq0, ak0, aq1, ak1
                i += 2
            for i in range(i, dk):
                Gi, Si, ki, ri, qi, kpi = G[i], S[i], kt[i], kr[i], qp[i], kp[i]
                for j in range(dv):
                    Si[j] -= ri * u[j]  # S_{t-1}
                    Gi[j] += qi * dp[j] - ki * g[j]  # finish t: G <- G - k g^T; begin t - 1: G += q do^T
                    du[j] += Gi[j] * kpi
                a, aq, ak = zero, zero, zero
                for j in range(dv):  # finish t: ∂k_t -= S_{t-1} g; begin t - 1 with S_{t-1} and the updated G
                    a += Si[j] * g[j]
                    aq += Si[j] * dp[j]
                    ak += Gi[j] * up[j]
                dkt[i] -= a
                dqp[i], dkp[i] = aq, ak
            u, up = up, u


class DeltaRuleFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, beta):
        use_torch_threads()
        q, k, v, beta = (x.contiguous() for x in (q, k, v, beta))
        (Bsz, T, H, dk), dv = k.shape, v.shape[-1]
        o, e = v.new_empty(v.shape), v.new_empty(v.shape)
        S_end = v.new_empty(Bsz, H, -(-T // TC), dk, dv)
        _delta_fwd(as_numpy(q), as_numpy(k), as_numpy(v), as_numpy(beta), o.numpy(), e.numpy(), S_end.numpy())
        ctx.save_for_backward(q, k, beta, e, S_end)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, beta, e, S_end = ctx.saved_tensors
        use_torch_threads()
        dq, dk, dv, dbeta = torch.empty_like(q), torch.empty_like(k), torch.empty_like(e), torch.empty_like(beta)
        _delta_bwd(as_numpy(q), as_numpy(k), as_numpy(beta), as_numpy(e), as_numpy(S_end), as_numpy(do),
                   dq.numpy(), dk.numpy(), dv.numpy(), dbeta.numpy())
        return dq, dk, dv, dbeta


def delta_rule_fused(q, k, v, beta):
    """Same signature and result as `delta_rule_loop`: q, k [B, T, H, d_k]; v [B, T, H, d_v]; beta
    [B, T, H], all on CPU in one dtype (float32 or float64) -> o [B, T, H, d_v]."""
    return DeltaRuleFn.apply(q, k, v, beta)
