"""The fused CPU small batched matmul equals `torch.matmul` (outputs, gradients, broadcasting, strides)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models.ops.small_matmul_fused import small_matmul_fused

from .test_fused_kernels import assert_rel_close

batch = st.lists(st.integers(1, 4), min_size=0, max_size=3)


@settings(max_examples=30, deadline=None)
@given(batch=batch, m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4),
       broadcast=st.booleans(), seed=st.integers(0, 2**16))
def test_fused_equals_matmul_outputs_and_gradients(batch, m, k, n, broadcast, seed):
    """H3's shapes (k vᵀ: m = n = d_h, k = 1; qᵀ s: m = 1) among others; broadcast: a has size-1 batch dims."""
    g = torch.Generator().manual_seed(seed)
    a_batch = [1 for _ in batch] if broadcast else batch
    a = torch.randn(*a_batch, m, k, generator=g).requires_grad_()
    b = torch.randn(*batch, k, n, generator=g).requires_grad_()
    c, c_ref = small_matmul_fused(a, b), a @ b
    assert c.shape == c_ref.shape
    assert_rel_close(c, c_ref, name="c")
    gc = torch.randn(c.shape, generator=g)
    for name, grad, grad_ref in zip("ab", torch.autograd.grad(c, (a, b), gc), torch.autograd.grad(c_ref, (a, b), gc)):
        assert_rel_close(grad, grad_ref, name=name)


def test_many_blocks_of_matrices_and_an_empty_inner_dim():
    """The published H3 layer's count of outer products (37,888: 19 blocks, the last partial); k = 0 is zeros."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(37888, 2, 1, generator=g).requires_grad_(), torch.randn(37888, 1, 2, generator=g).requires_grad_()
    c = small_matmul_fused(a, b)
    assert_rel_close(c, a @ b, name="c")
    gc = torch.randn(c.shape, generator=g)
    for name, grad, grad_ref in zip("ab", torch.autograd.grad(c, (a, b), gc), torch.autograd.grad(a @ b, (a, b), gc)):
        assert_rel_close(grad, grad_ref, name=name)
    empty = small_matmul_fused(torch.randn(5, 2, 0), torch.randn(5, 0, 3))
    assert torch.equal(empty, torch.zeros(5, 2, 3))


def test_fused_takes_strided_views():
    """H3 passes per-head views of one projection's chunks (not contiguous)."""
    qkv = torch.randn(3, 5, 24)
    q, k, v = qkv.chunk(3, dim=-1)
    kh, vh = k.unflatten(-1, (4, 2)).unsqueeze(-1), v.unflatten(-1, (4, 2)).unsqueeze(-2)
    assert not kh.is_contiguous()
    assert_rel_close(small_matmul_fused(kh, vh), kh @ vh)
    assert_rel_close(small_matmul_fused(kh.mT, vh.mT), kh.mT @ vh.mT)  # per-head dot products


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (3, 2, 1, 2), (2, 1, 2, 2)])
def test_gradcheck_float64(shape):
    B, m, k, n = shape
    a = torch.randn(B, m, k, dtype=torch.float64, requires_grad=True)
    b = torch.randn(B, k, n, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(small_matmul_fused, (a, b))
