"""The fused row norms (`ops.row_norm_fused`, behind `ops.dispatch.rms_norm` / `l2_normalize` and the models'
`RMSNorm`) equal torch's own ops, values and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models.norms import RMSNorm
from mecheval.models.ops.dispatch import kernel_mode, l2_normalize, rms_norm
from mecheval.models.ops.row_norm_fused import ROWS


def inputs(shape, seed, dtype=torch.float64, tiny_rows=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=dtype)
    if tiny_rows:  # rows below eps: the clamped branch of the L2 norm
        x[..., ::2, :] *= 1e-14
    return x.requires_grad_(), torch.randn(*shape, generator=g, dtype=dtype)


def value_and_grads(fn, x, gy, params=()):
    y = fn(x)
    return [y, *torch.autograd.grad(y, [x, *params], gy)]


shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


@settings(max_examples=25, deadline=None)
@given(shape=shapes, d=st.integers(1, 9), eps=st.sampled_from([None, 1e-5, 0.5]), seed=st.integers(0, 2**16))
def test_rmsnorm_equals_torch_rmsnorm(shape, d, eps, seed):
    ours, torchs = RMSNorm(d, eps=eps).double(), torch.nn.RMSNorm(d, eps=eps).double()
    with torch.no_grad():
        ours.weight.normal_(generator=torch.Generator().manual_seed(seed))
        torchs.weight.copy_(ours.weight)
    x, gy = inputs((*shape, d), seed)
    for a, b in zip(value_and_grads(ours, x, gy, [ours.weight]), value_and_grads(torchs, x, gy, [torchs.weight])):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert ours.state_dict().keys() == torchs.state_dict().keys()


@settings(max_examples=25, deadline=None)
@given(shape=shapes, d=st.integers(1, 9), scale=st.sampled_from([1.0, 0.125, 3.0]), tiny=st.booleans(),
       seed=st.integers(0, 2**16))
def test_l2_normalize_equals_f_normalize(shape, d, scale, tiny, seed):
    x, gy = inputs((*shape, 2, d), seed, tiny_rows=tiny)
    ours = value_and_grads(lambda z: l2_normalize(z, scale), x, gy)
    ref = value_and_grads(lambda z: F.normalize(z, dim=-1) * scale, x, gy)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_float32_many_rows_and_strided_input_on_both_paths():
    """More rows than one block of the backward (several ∂w partials); a strided view, as DeltaNet's q."""
    x, gy = inputs((3 * ROWS + 5, 24), seed=3, dtype=torch.float32)
    w = torch.randn(8, dtype=torch.float32, requires_grad=True)
    view = x[:, 8:16]  # non-contiguous
    results = []
    for mode in ("auto", "reference"):
        with kernel_mode(mode):
            results.append(value_and_grads(lambda z: rms_norm(z[:, 8:16], w, 1e-5), x, gy[:, 8:16], [w])
                           + value_and_grads(lambda z: l2_normalize(z[:, 8:16], 0.5), x, gy[:, 8:16]))
    assert not view.is_contiguous()
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-5 * b.abs().max().item())


def test_rmsnorm_default_eps_follows_the_dtype():
    x = torch.full((2, 3), 1e-5, dtype=torch.float32)  # mean(x^2) = 1e-10, far below float32's eps 1.2e-7
    torch.testing.assert_close(RMSNorm(3)(x), torch.nn.RMSNorm(3)(x))


@pytest.mark.parametrize("fn", [lambda x: l2_normalize(x, 0.5), RMSNorm(6).double()])
def test_gradcheck(fn):
    x, _ = inputs((3, 4, 6), seed=1)
    assert torch.autograd.gradcheck(fn, (x,))
