"""Fused CPU batched matmul of many tiny matrices (numba): `a @ b` where torch's per-matrix gemm calls cost
more than the arithmetic (H3's per-head outer products k vᵀ and gates sᵀ q, 2 × 2 at head dim 2).

    c[..., r, s] = Σ_l a[..., r, l] b[..., l, s]          a: [..., m, k]; b: [..., k, n]; c: [..., m, n]
    ∂a = ∂c bᵀ,  ∂b = aᵀ ∂c                                 (the same kernel on transposed views)

Leading dims broadcast as in `torch.matmul` (expanded, then flattened to one contiguous batch dim whose
blocks run in parallel); the sum over l runs in order l = 0 .. k-1. Kernels are compiled per (m, k, n)
(cached on disk like the others). CPU, float32 or float64; IEEE arithmetic.
"""

from __future__ import annotations

import functools
import math

import torch
from numba import prange

from mecheval.models.ops.numba_kernels import as_numpy, parallel_kernel, use_torch_threads

BLOCK = 2048  # matrices per work item


@functools.cache
def _forward(m: int, k: int, n: int):
    """c = a @ b for a: [N, m, k], b: [N, k, n] (any strides) -> c [N, m, n] (output), blocks of matrices in
    parallel, compiled for these sizes: loops over constants unroll into straight-line code per matrix
    (at H3's 2 × 1 × 2 and 1 × 2 × 2, 3-4x faster than one kernel for run-time sizes); k = 0 gives zeros.
    The sizes are the closure's only free variables (ints: numba's disk cache keys on their values)."""

    @parallel_kernel(fastmath=False)
    def bmm(a, b, c):  # pragma: no cover - compiled
        N = a.shape[0]
        for blk in prange((N + BLOCK - 1) // BLOCK):
            for i in range(blk * BLOCK, min(N, (blk + 1) * BLOCK)):
                for r in range(m):
                    for s in range(n):
                        acc = c.dtype.type(0)
                        for l in range(k):
                            acc += a[i, r, l] * b[i, l, s]
                        c[i, r, s] = acc

    return bmm


class SmallMatmulFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        use_torch_threads()
        a, b = a.contiguous(), b.contiguous()  # once: the backward reads the same copies
        ctx.save_for_backward(a, b)
        c = a.new_empty(a.shape[0], a.shape[1], b.shape[2])
        _forward(*a.shape[1:], b.shape[2])(as_numpy(a), as_numpy(b), c.numpy())
        return c

    @staticmethod
    def backward(ctx, gc):
        a, b = ctx.saved_tensors
        use_torch_threads()
        ga, gb = torch.empty_like(a), torch.empty_like(b)
        (m, k), n = a.shape[1:], b.shape[2]
        a_, b_, gc_ = as_numpy(a), as_numpy(b), as_numpy(gc)
        _forward(m, n, k)(gc_, b_.transpose(0, 2, 1), ga.numpy())  # ∂a = ∂c bᵀ
        _forward(k, m, n)(a_.transpose(0, 2, 1), gc_, gb.numpy())  # ∂b = aᵀ ∂c
        return ga, gb


def small_matmul_fused(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` for a [..., m, k], b [..., k, n] (CPU, one dtype, float32/64) -> [..., m, n]."""
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:])
    N = math.prod(batch)  # explicit: -1 is ambiguous for an empty inner dim
    c = SmallMatmulFn.apply(a.reshape(N, *a.shape[-2:]), b.reshape(N, *b.shape[-2:]))
    return c.view(*batch, *c.shape[-2:])
