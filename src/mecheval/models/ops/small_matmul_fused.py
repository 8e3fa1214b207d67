"""Fused CPU batched matmul of many tiny matrices (numba): `a @ b` where torch's per-matrix gemm calls cost
more than the arithmetic (H3's per-head outer products k vᵀ and gates sᵀ q, 2 × 2 at head dim 2).

    c[..., r, s] = Σ_l a[..., r, l] b[..., l, s]          a: [..., m, k]; b: [..., k, n]; c: [..., m, n]
    ∂a = ∂c bᵀ,  ∂b = aᵀ ∂c                                 (the same kernel on transposed views)

Leading dims broadcast as in `torch.matmul` (expanded, then flattened to one contiguous batch dim whose
blocks run in parallel); the sum over l runs in order l = 0 .. k-1; the backward computes both input
gradients in one call. CPU, float32 or float64; IEEE arithmetic.
"""

from __future__ import annotations

import math

import torch
from numba import njit, prange

from mecheval.models.ops.numba_kernels import as_numpy, parallel_kernel, use_torch_threads

BLOCK = 2048  # matrices per work item


@njit(cache=True, fastmath=False)
def _bmm_block(a, b, c, lo, hi):  # pragma: no cover - compiled
    """c[i] = a[i] @ b[i] for lo <= i < hi. Each output entry is one pass over the block's matrices per
    term l (a loop LLVM vectorises), not a tiny loop per matrix: m, k, n are run-time sizes of 1 or 2 in
    H3, too short to be loops of their own."""
    m, k, n = a.shape[1], a.shape[2], b.shape[2]
    for r in range(m):
        for s in range(n):
            if k == 0:  # an empty sum
                c[lo:hi, r, s] = 0
                continue
            for i in range(lo, hi):
                c[i, r, s] = a[i, r, 0] * b[i, 0, s]
            for l in range(1, k):
                for i in range(lo, hi):
                    c[i, r, s] += a[i, r, l] * b[i, l, s]


@parallel_kernel(fastmath=False)
def _bmm(a, b, c):  # pragma: no cover - compiled
    """a: [N, m, k], b: [N, k, n] (any strides); c: [N, m, n] output; blocks of matrices in parallel."""
    N = a.shape[0]
    for blk in prange((N + BLOCK - 1) // BLOCK):
        _bmm_block(a, b, c, blk * BLOCK, min(N, (blk + 1) * BLOCK))


@parallel_kernel(fastmath=False)
def _bmm_grads(a, b, gc, ga, gb):  # pragma: no cover - compiled
    """Both input gradients in one call: ga = gc bᵀ [N, m, k], gb = aᵀ gc [N, k, n] (outputs)."""
    N = a.shape[0]
    aT, bT = a.transpose(0, 2, 1), b.transpose(0, 2, 1)
    for blk in prange((N + BLOCK - 1) // BLOCK):
        lo, hi = blk * BLOCK, min(N, (blk + 1) * BLOCK)
        _bmm_block(gc, bT, ga, lo, hi)
        _bmm_block(aT, gc, gb, lo, hi)


class SmallMatmulFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        use_torch_threads()
        a, b = a.contiguous(), b.contiguous()  # once: the backward reads the same copies
        ctx.save_for_backward(a, b)
        c = a.new_empty(a.shape[0], a.shape[1], b.shape[2])
        _bmm(as_numpy(a), as_numpy(b), c.numpy())
        return c

    @staticmethod
    def backward(ctx, gc):
        a, b = ctx.saved_tensors
        use_torch_threads()
        ga, gb = torch.empty_like(a), torch.empty_like(b)
        _bmm_grads(as_numpy(a), as_numpy(b), as_numpy(gc), ga.numpy(), gb.numpy())
        return ga, gb


def small_matmul_fused(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` for a [..., m, k], b [..., k, n] (CPU, one dtype, float32/64) -> [..., m, n]."""
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:])
    N = math.prod(batch)  # explicit: -1 is ambiguous for an empty inner dim
    c = SmallMatmulFn.apply(a.reshape(N, *a.shape[-2:]), b.reshape(N, *b.shape[-2:]))
    return c.view(*batch, *c.shape[-2:])
