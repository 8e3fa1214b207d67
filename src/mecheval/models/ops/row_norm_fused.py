"""Fused CPU row normalisations (numba): RMSNorm and L2 normalisation over the last dim, forward and backward.

torch's `nn.RMSNorm` has a fused forward on CPU, but autograd differentiates it op by op (pow, mean,
rsqrt, mul): at [32, 37, 64] its backward costs ten times its forward, as does `F.normalize`'s. Both are
one kernel here, per row of d entries:

    r = 1 / max(sqrt(Σ x² / m + eps_add), eps_clamp),   x̂ = x r,   y = x̂ ⊙ w
    ∂x = r (g − c x̂ Σ(g ⊙ x̂)),   g = ∂y ⊙ w,   ∂w = Σ_rows ∂y ⊙ x̂

RMSNorm: m = d, eps_add = eps, eps_clamp = 0 (c = 1 / d). L2 (`F.normalize(x, dim=-1, eps) * s`): m = 1,
eps_add = 0, eps_clamp = eps, w = s (c = 1 where |x| ≥ eps; 0 where clamped, r being a constant there).
Shapes: x, y: [R, d] rows; w: [d]; r, c: [R]. Rows run in parallel in blocks; ∂w goes to per-block
partials summed with torch. The sums over a row may be reassociated (vectorised). CPU, float32 or float64.
"""

from __future__ import annotations

import math

import torch
from numba import prange

from mecheval.models.ops.numba_kernels import as_numpy, parallel_kernel, use_torch_threads

ROWS = 256  # rows per work item of the backward (one ∂w partial each)


@parallel_kernel(fastmath={"reassoc"})
def _norm_fwd(x, w, m, eps_add, eps_clamp, y, xhat, r, c):  # pragma: no cover - compiled
    """y, xhat: [R, d]; r, c: [R] outputs."""
    R, d = x.shape
    for i in prange(R):
        xi = x[i]
        ss = x.dtype.type(0)
        for j in range(d):
            ss += xi[j] * xi[j]
        norm = math.sqrt(ss / m + eps_add)  # per row in float64
        clamped = norm < eps_clamp
        ri = x.dtype.type(1 / (eps_clamp if clamped else norm))
        r[i], c[i] = ri, 0.0 if clamped else 1 / m
        for j in range(d):
            xhat[i, j] = xi[j] * ri
            y[i, j] = xhat[i, j] * w[j]


@parallel_kernel(fastmath={"reassoc"})
def _norm_bwd(gy, xhat, r, c, w, gx, gw_part):  # pragma: no cover - compiled
    """gx: [R, d] output; gw_part: [ceil(R / ROWS), d] zeros, one block's share of ∂w each."""
    R, d = gy.shape
    for blk in prange((R + ROWS - 1) // ROWS):
        gwb = gw_part[blk]
        for i in range(blk * ROWS, min(R, (blk + 1) * ROWS)):
            gi, xi = gy[i], xhat[i]
            dot = gy.dtype.type(0)
            for j in range(d):
                dot += gi[j] * w[j] * xi[j]
            a, ri, gxi = c[i] * dot, r[i], gx[i]
            for j in range(d):
                gxi[j] = ri * (gi[j] * w[j] - a * xi[j])
                gwb[j] += gi[j] * xi[j]


class RowNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, m: float, eps_add: float, eps_clamp: float):
        use_torch_threads()
        rows = as_numpy(x).reshape(-1, x.shape[-1])
        y, xhat = x.new_empty(rows.shape), x.new_empty(rows.shape)
        r, c = x.new_empty(rows.shape[0]), x.new_empty(rows.shape[0])
        _norm_fwd(rows, as_numpy(w), m, eps_add, eps_clamp, y.numpy(), xhat.numpy(), r.numpy(), c.numpy())
        ctx.save_for_backward(xhat, r, c, w)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, gy):
        xhat, r, c, w = ctx.saved_tensors
        use_torch_threads()
        gx = torch.empty_like(xhat)
        gw_part = xhat.new_zeros(-(-xhat.shape[0] // ROWS), xhat.shape[1])
        _norm_bwd(as_numpy(gy).reshape(xhat.shape), xhat.numpy(), r.numpy(), c.numpy(), as_numpy(w), gx.numpy(), gw_part.numpy())
        return gx.view(gy.shape), gw_part.sum(0), None, None, None


def rms_norm_fused(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`F.rms_norm(x, (d,), weight, eps)`: x [..., d], weight [d] (CPU, one dtype, float32/64) -> [..., d]."""
    return RowNormFn.apply(x, weight, float(x.shape[-1]), eps, 0.0)


def l2_normalize_fused(x: torch.Tensor, scale: float, eps: float) -> torch.Tensor:
    """`F.normalize(x, dim=-1, eps=eps) * scale`: x [..., d] (CPU, float32/64) -> [..., d]."""
    return RowNormFn.apply(x, x.new_full(x.shape[-1:], scale), 1.0, 0.0, eps)
