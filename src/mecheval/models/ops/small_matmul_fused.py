"""Fused CPU batched matmul of many tiny matrices (numba): `a @ b` where torch's per-matrix gemm calls cost
more than the arithmetic (H3's per-head outer products k vᵀ and gates sᵀ q, 2 × 2 at head dim 2).

    c[..., r, s] = Σ_l a[..., r, l] b[..., l, s]          a: [..., m, k]; b: [..., k, n]; c: [..., m, n]
    ∂a = ∂c bᵀ,  ∂b = aᵀ ∂c                                 (the same kernel on transposed views)

Leading dims broadcast as in `torch.matmul` (expanded, then flattened to one batch dim that runs in
parallel); the sum over l runs in order l = 0 .. k-1. CPU, float32 or float64; IEEE arithmetic.
"""

from __future__ import annotations

import torch
from numba import njit, prange

from mecheval.models.ops.selective_scan_fused import _use_torch_threads  # also sets the threading layer


@njit(parallel=True, cache=True, fastmath=False)
def _bmm(a, b, c):  # pragma: no cover - compiled
    """a: [N, m, k], b: [N, k, n] (any strides); c: [N, m, n] output."""
    N, m, k = a.shape
    n = b.shape[2]
    for i in prange(N):
        for r in range(m):
            for s in range(n):
                acc = a.dtype.type(0)
                for l in range(k):
                    acc += a[i, r, l] * b[i, l, s]
                c[i, r, s] = acc


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [N, m, k] @ b [N, k, n] -> c [N, m, n] by the kernel (inputs any strides)."""
    c = a.new_empty(a.shape[0], a.shape[1], b.shape[2])
    _bmm(a.detach().numpy(), b.detach().numpy(), c.numpy())
    return c


class SmallMatmulFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        _use_torch_threads()
        ctx.save_for_backward(a, b)
        return _matmul(a, b)

    @staticmethod
    def backward(ctx, gc):
        a, b = ctx.saved_tensors
        _use_torch_threads()
        ga = _matmul(gc, b.mT) if ctx.needs_input_grad[0] else None
        gb = _matmul(a.mT, gc) if ctx.needs_input_grad[1] else None
        return ga, gb


def small_matmul_fused(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` for a [..., m, k], b [..., k, n] (CPU, one dtype, float32/64) -> [..., m, n]."""
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:])
    c = SmallMatmulFn.apply(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return c.view(*batch, *c.shape[-2:])
