"""The fused CPU short conv equals the F.conv1d reference (outputs and gradients); ShortConv dispatches to it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models.ops import dispatch
from mecheval.models.ops.short_conv import short_conv
from mecheval.models.ops.short_conv_fused import short_conv_fused
from mecheval.models.shortconv import ShortConv

from .test_fused_kernels import assert_rel_close


def conv_inputs(B, T, C, k, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(B, T, C, generator=g, dtype=dtype), torch.randn(C, 1, k, generator=g, dtype=dtype)
    return x.requires_grad_(), w.requires_grad_()


@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 20), C=st.integers(1, 20), k=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_fused_equals_reference_outputs_and_gradients(B, T, C, k, seed):
    """k > T included: taps before t = 0 meet zeros on both paths."""
    x, w = conv_inputs(B, T, C, k, seed)
    y, y_ref = short_conv_fused(x, w), short_conv(x, w)
    assert_rel_close(y, y_ref, name="y")
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed + 1))
    for name, g, g_ref in zip("xw", torch.autograd.grad(y, (x, w), gy), torch.autograd.grad(y_ref, (x, w), gy)):
        assert_rel_close(g, g_ref, name=name)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 5, 3, 4), (1, 3, 2, 6)])
def test_gradcheck_float64(shape):
    x, w = conv_inputs(*shape, seed=sum(shape), dtype=torch.float64)
    assert torch.autograd.gradcheck(short_conv_fused, (x, w))


def test_fused_takes_a_strided_slice():
    """x as the mixers pass it: one half of an input projection's output."""
    x, w = conv_inputs(2, 7, 8, 4, seed=2)
    half = x.repeat(1, 1, 2)[..., 8:]
    assert not half.is_contiguous()
    assert_rel_close(short_conv_fused(half, w), short_conv(x, w))


def test_shortconv_dispatches_and_its_step_form_agrees(monkeypatch):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    conv = ShortConv(6, 4)
    x = torch.randn(2, 9, 6)
    y = conv(x)
    assert y.grad_fn.name() == "ShortConvFnBackward"
    with dispatch.kernel_mode("reference"):
        y_ref = conv(x)
    assert y_ref.grad_fn.name() != "ShortConvFnBackward"
    assert_rel_close(y, y_ref)
    state, steps = conv.init_state(2), []
    for t in range(9):
        y_t, state = conv.step(x[:, t], state)
        steps.append(y_t)
    assert_rel_close(torch.stack(steps, 1), y)
