"""`dispatch.causal_conv` (direct on CPU for short sequences) equals the FFT convolution and the Toeplitz
reference (outputs and gradients); the long convolution dispatches to it."""

from __future__ import annotations

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mecheval.models.ops import dispatch
from mecheval.models.ops.fft_conv import FFT_MIN_TAPS, fft_conv, fft_conv_direct

from .test_fused_kernels import assert_rel_close


@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 2 * FFT_MIN_TAPS), C=st.integers(1, 20), seed=st.integers(0, 2**16))
@example(B=2, T=37, C=64, seed=0)  # Hyena's long conv at the published T and width
def test_causal_conv_equals_fft_and_toeplitz(B, T, C, seed):
    g = torch.Generator().manual_seed(seed)
    u, h = torch.randn(B, T, C, generator=g).requires_grad_(), torch.randn(T, C, generator=g).requires_grad_()
    y = dispatch.causal_conv(u, h)
    gy = torch.randn(y.shape, generator=g)
    grads = torch.autograd.grad(y, (u, h), gy)
    for reference in (fft_conv, fft_conv_direct):
        y_ref = reference(u, h)
        assert_rel_close(y, y_ref, rtol=1e-4, name=f"y vs {reference.__name__}")
        for name, a, b in zip("uh", grads, torch.autograd.grad(y_ref, (u, h), gy)):
            assert_rel_close(a, b, rtol=1e-4, name=f"{name} vs {reference.__name__}")
