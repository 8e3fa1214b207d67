"""Fused CPU short causal depthwise convolution (numba): `ops.short_conv.short_conv` without transposes.

    y[b, t, c] = Σ_j w[c, j] x[b, t - (k-1) + j, c]          (x = 0 before t = 0)
    ∂x[b, s, c] = Σ_j w[c, j] gy[b, s + (k-1) - j, c]        (gy = 0 from t = T on)
    ∂w[c, j]    = Σ_{b,t} gy[b, t, c] x[b, t - (k-1) + j, c]

Shapes: x, y: [B, T, C] (channels innermost, as the mixers hold them); weight: [C, 1, k].
Batch rows run in parallel, each update vectorised over the channels; ∂w goes to per-row partials
[B, k, C] summed with torch afterwards. CPU, float32 or float64; IEEE arithmetic (no fastmath). `causal_conv_fused` runs a long convolution
(one T-step filter per channel) through it where that beats an FFT.
"""

from __future__ import annotations

import torch
from numba import prange

from mecheval.models.ops.fft_conv import FFT_MIN_TAPS, fft_conv
from mecheval.models.ops.numba_kernels import as_numpy, parallel_kernel, use_torch_threads


@parallel_kernel(fastmath=False)
def _conv_fwd(x, wT, y):  # pragma: no cover - compiled
    """x, y: [B, T, C]; wT: [k, C] (w transposed)."""
    Bsz, T, C = x.shape
    k = wT.shape[0]
    for b in prange(Bsz):
        for t in range(T):
            yt = y[b, t]
            yt[:] = 0
            for j in range(max(0, k - 1 - t), k):
                xs, wj = x[b, t - (k - 1) + j], wT[j]
                for c in range(C):
                    yt[c] += wj[c] * xs[c]


@parallel_kernel(fastmath=False)
def _conv_bwd(x, wT, gy, dx, dw_part):  # pragma: no cover - compiled
    """dx: [B, T, C]; dw_part: [B, k, C] zeros, row b's share of ∂w^T."""
    Bsz, T, C = x.shape
    k = wT.shape[0]
    for b in prange(Bsz):
        for s in range(T):
            dxs = dx[b, s]
            dxs[:] = 0
            for j in range(k - 1 - min(k - 1, T - 1 - s), k):  # taps whose output t = s + k-1-j < T
                gt, wj = gy[b, s + (k - 1) - j], wT[j]
                for c in range(C):
                    dxs[c] += wj[c] * gt[c]
        for j in range(k):
            dwj = dw_part[b, j]
            for t in range(max(0, k - 1 - j), T):
                xs, gt = x[b, t - (k - 1) + j], gy[b, t]
                for c in range(C):
                    dwj[c] += gt[c] * xs[c]


class ShortConvFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        use_torch_threads()
        x = x.contiguous()  # once: the backward reads the same copy (a mixer's x is a strided slice)
        y = x.new_empty(x.shape)
        _conv_fwd(as_numpy(x), as_numpy(weight[:, 0].T), y.numpy())
        ctx.save_for_backward(x, weight)
        return y

    @staticmethod
    def backward(ctx, gy):
        x, weight = ctx.saved_tensors
        use_torch_threads()
        dx = torch.empty(x.shape, dtype=x.dtype)
        dw_part = x.new_zeros(x.shape[0], weight.shape[-1], x.shape[-1])
        _conv_bwd(as_numpy(x), as_numpy(weight[:, 0].T), as_numpy(gy), dx.numpy(), dw_part.numpy())
        return dx, dw_part.sum(0).T.unsqueeze(1)


def short_conv_fused(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Causal depthwise conv: x [B, T, C] (CPU), weight [C, 1, k] of x's dtype (float32/64) -> y [B, T, C]."""
    return ShortConvFn.apply(x, weight)


def causal_conv_fused(u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """`ops.fft_conv.fft_conv`'s causal long convolution on CPU: u [B, T, C]; h [T, C] of u's dtype -> y [B, T, C].
    Up to FFT_MIN_TAPS steps direct (`short_conv_fused` with h reversed as T taps), else by FFT."""
    if u.shape[1] <= FFT_MIN_TAPS:
        return short_conv_fused(u, h.flip(0).T.unsqueeze(1))
    return fft_conv(u, h)
