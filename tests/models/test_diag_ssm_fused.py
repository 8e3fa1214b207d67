"""The fused CPU diagonal SSM equals the FFT reference (outputs and gradients); H3 dispatches to it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mecheval.models.ops.diag_ssm import diag_ssm, diag_ssm_kernel, diag_ssm_loop
from mecheval.models.ops.diag_ssm_fused import diag_ssm_fused, diag_ssm_kernel_fused

from .test_fused_kernels import assert_rel_close
from .test_ops import s4d_params


def ssm_inputs(B, T, H, M, E, seed, dtype=torch.float32):
    """u [B, T, H, *E] and S4D-Lin dA, dB, C [H, M] (complex of u's precision), all requiring grad."""
    cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    u = torch.randn(B, T, H, *E, generator=torch.Generator().manual_seed(seed + 1), dtype=dtype)
    return [u.requires_grad_(), *(p.to(cdtype).requires_grad_() for p in s4d_params(H, M, seed))]


@settings(max_examples=15, deadline=None)
@given(
    B=st.integers(1, 3), T=st.integers(1, 80), H=st.integers(1, 3), M=st.sampled_from([1, 3, 64, 512]),
    E=st.sampled_from([(), (2,), (2, 2)]), skip=st.booleans(), seed=st.integers(0, 2**16),
)
@example(B=2, T=37, H=2, M=512, E=(2, 2), skip=True, seed=0)  # the published H3 (512 modes, head dim 2), T = 37
@example(B=1, T=80, H=1, M=4, E=(), skip=False, seed=1)  # T > FFT_MIN_TAPS: the conv goes by FFT
def test_fused_equals_reference_outputs_and_gradients(B, T, H, M, E, skip, seed):
    xs = ssm_inputs(B, T, H, M, E, seed)
    if skip:
        xs.append(torch.randn(H, generator=torch.Generator().manual_seed(seed + 3)).requires_grad_())
    y, y_ref = diag_ssm_fused(*xs), diag_ssm(*xs)
    assert_rel_close(y, y_ref, rtol=1e-4, name="y")
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed + 2))
    names = ["u", "dA", "dB", "C", "D"]
    for name, g, g_ref in zip(names, torch.autograd.grad(y, xs, gy), torch.autograd.grad(y_ref, xs, gy)):
        assert_rel_close(g, g_ref, rtol=1e-4, name=name)


def test_skip_is_d_times_u():
    u, dA, dB, C = ssm_inputs(2, 9, 3, 4, (2,), seed=5)
    D = torch.randn(3)
    torch.testing.assert_close(diag_ssm(u, dA, dB, C, D), diag_ssm_loop(u, dA, dB, C) + D[:, None] * u, rtol=1e-4, atol=1e-5)


def test_kernel_equals_the_polar_form_in_float64():
    dA, dB, C = (p.to(torch.complex128) for p in s4d_params(3, 16, 0))
    torch.testing.assert_close(diag_ssm_kernel_fused(dA, dB, C, 50), diag_ssm_kernel(dA, dB, C, 50), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1, ()), (2, 5, 2, 3, (2,)), (1, 7, 1, 4, (2, 2))])
def test_gradcheck_float64(shape):
    xs = ssm_inputs(*shape, seed=3, dtype=torch.float64)
    assert torch.autograd.gradcheck(diag_ssm_fused, xs)
