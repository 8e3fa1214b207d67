"""The fused CPU diagonal SSM equals the FFT reference (outputs and gradients); H3 dispatches to it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mecheval.models.ops import dispatch
from mecheval.models.ops.diag_ssm import diag_ssm, diag_ssm_kernel, diag_ssm_loop
from mecheval.models.ops.diag_ssm_fused import diag_ssm_fused, diag_ssm_kernel_fused

from .test_dispatch import autograd_nodes
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


def h3_params(H, M, seed, dtype=torch.float32):
    """S4D-Lin's raw parameters as H3 holds them (log_dt [H], log_A_real, A_imag [H, M], B, C [H, M, 2]),
    spread beyond H3's init so every term of the discretisation's gradient matters; all requiring grad."""
    g = torch.Generator().manual_seed(seed)
    log_dt = torch.empty(H, dtype=dtype).uniform_(-7, -1, generator=g)
    log_A_real = torch.randn(H, M, generator=g, dtype=dtype) * 0.5 - 0.7
    A_imag = torch.pi * torch.arange(M, dtype=dtype).repeat(H, 1) + torch.randn(H, M, generator=g, dtype=dtype)
    B, C = torch.randn(H, M, 2, generator=g, dtype=dtype), torch.randn(H, M, 2, generator=g, dtype=dtype)
    return [p.requires_grad_() for p in (log_dt, log_A_real, A_imag, B, C)]


@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 80), H=st.integers(1, 3), M=st.sampled_from([1, 3, 512]),
       E=st.sampled_from([(), (2, 2)]), seed=st.integers(0, 2**16))
@example(B=2, T=37, H=2, M=512, E=(2, 2), seed=0)  # the published H3
def test_bilinear_fused_equals_discretising_in_torch(B, T, H, M, E, seed):
    """`diag_ssm_bilinear` (discretisation inside the fused kernel) against `diag_ssm(u, *bilinear(...))`,
    outputs and the gradients of every parameter."""
    u = torch.randn(B, T, H, *E, generator=torch.Generator().manual_seed(seed + 1)).requires_grad_()
    params, D = h3_params(H, M, seed), torch.randn(H).requires_grad_()
    xs = [u, *params, D]
    y = dispatch.diag_ssm_bilinear(u, *params, D)
    with dispatch.kernel_mode("reference"):
        y_ref = dispatch.diag_ssm_bilinear(u, *params, D)
    assert "BilinearSSMKernelFn" in autograd_nodes(y) and "BilinearSSMKernelFn" not in autograd_nodes(y_ref)
    assert_rel_close(y, y_ref, rtol=1e-4, name="y")
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed + 2))
    names = ["u", "log_dt", "log_A_real", "A_imag", "B", "C", "D"]
    for name, g, g_ref in zip(names, torch.autograd.grad(y, xs, gy), torch.autograd.grad(y_ref, xs, gy)):
        # a parameter's gradient sums up to B·T·M float32 terms that cancel (the two paths add them in other
        # orders: 2.3e-4 apart on one log_dt of a drawn example); u's has no such sum
        assert_rel_close(g, g_ref, rtol=1e-4 if name == "u" else 1e-3, name=name)


def test_bilinear_gradcheck_float64():
    u = torch.randn(2, 6, 2, 2, dtype=torch.float64).requires_grad_()
    xs = [u, *h3_params(2, 3, seed=4, dtype=torch.float64)]
    assert torch.autograd.gradcheck(lambda u, *p: dispatch.diag_ssm_bilinear(u, *p), xs)
