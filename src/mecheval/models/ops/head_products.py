"""Per-head outer products and contractions (H3's k v^T and its q gate), fused for CPU (numba).

    outer(a, b)[..., h, i, j] = a[..., h, i] b[..., h, j]             a, b: [..., H, d] -> [..., H, d, d]
    contract(a, s)[..., h, j] = Σ_i a[..., h, i] s[..., h, i, j]      a: [..., H, d]; s: [..., H, d, d] -> [..., H, d]

Each is the other's backward (g: the output's gradient, ^T: swapping i and j):
    outer:     ∂a = contract(b, g^T),  ∂b = contract(a, g)
    contract:  ∂a = contract(g, s^T),  ∂s = outer(a, g)
With H3's head dim of 2, torch spends far more on dispatching [..., 2, 2] products (broadcasts or
batched matmuls of 37,888 2x2 matrices) than on the arithmetic; these loops run straight through.
`outer_reference` / `contract_reference` are the same products as batched matmuls. CPU, float32/64.
"""

from __future__ import annotations

import torch
from numba import njit, prange

from mecheval.models.ops.selective_scan_fused import _use_torch_threads  # also sets the threading layer


@njit(parallel=True, cache=True, fastmath=False)
def _outer(a, b, y):  # pragma: no cover - compiled
    """a, b: [R, H, d]; y: [R, H, d, d] output."""
    R, H, d = a.shape
    for r in prange(R):
        for h in range(H):
            for i in range(d):
                for j in range(d):
                    y[r, h, i, j] = a[r, h, i] * b[r, h, j]


@njit(parallel=True, cache=True, fastmath=False)
def _contract(a, s, y):  # pragma: no cover - compiled
    """a: [R, H, d]; s: [R, H, d, d] (any strides, e.g. transposed); y: [R, H, d] output."""
    R, H, d = a.shape
    for r in prange(R):
        for h in range(H):
            for j in range(d):
                acc = a[r, h, 0] * s[r, h, 0, j]
                for i in range(1, d):
                    acc += a[r, h, i] * s[r, h, i, j]
                y[r, h, j] = acc


def _rows(x: torch.Tensor, tail: int):
    """x [..., *tail dims] -> numpy [R, *tail dims] (R: the leading dims flattened; a view where torch can)."""
    return x.detach().reshape(-1, *x.shape[x.dim() - tail :]).numpy()


def _run_outer(a, b):
    y = a.new_empty(*a.shape, a.shape[-1])
    _outer(_rows(a, 2), _rows(b, 2), _rows(y, 3))
    return y


def _run_contract(a, s):
    y = a.new_empty(a.shape)
    _contract(_rows(a, 2), _rows(s, 3), _rows(y, 2))
    return y


class OuterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        _use_torch_threads()
        ctx.save_for_backward(a, b)
        return _run_outer(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        _use_torch_threads()
        return _run_contract(b, g.mT), _run_contract(a, g)


class ContractFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, s):
        _use_torch_threads()
        ctx.save_for_backward(a, s)
        return _run_contract(a, s)

    @staticmethod
    def backward(ctx, g):
        a, s = ctx.saved_tensors
        _use_torch_threads()
        return _run_contract(g, s.mT), _run_outer(a, g)


def outer_fused(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a, b [..., H, d] (CPU, one dtype) -> a_i b_j per head [..., H, d, d]."""
    return OuterFn.apply(a, b)


def contract_fused(a: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """a [..., H, d], s [..., H, d, d] (CPU, one dtype) -> Σ_i a_i s_ij per head [..., H, d]."""
    return ContractFn.apply(a, s)


def outer_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.unsqueeze(-1) @ b.unsqueeze(-2)


def contract_reference(a: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return (a.unsqueeze(-2) @ s).squeeze(-2)
