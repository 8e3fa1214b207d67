"""The FFT long convolution and the implicit long-convolution module (`LongConv`)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models.longconv import LongConv
from mecheval.models.ops.fft_conv import fft_conv, fft_conv_direct
from mecheval.models.shortconv import make_conv

SOME = settings(max_examples=25, deadline=None)


def randn(*shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ------------------------------------------------------------------------------------------ fft_conv


@SOME
@given(B=st.integers(1, 3), T=st.integers(1, 80), C=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_fft_conv_equals_the_quadratic_reference(B, T, C, seed):
    u, h = randn(B, T, C, seed=seed), randn(T, C, seed=seed + 1)
    torch.testing.assert_close(fft_conv(u, h), fft_conv_direct(u, h), atol=1e-10, rtol=1e-10)
    # float32 in, float32 out, within float32 precision of the exact result.
    y32 = fft_conv(u.float(), h.float())
    assert y32.dtype == torch.float32
    torch.testing.assert_close(y32.double(), fft_conv_direct(u, h), atol=1e-4 * math.sqrt(T), rtol=1e-4)


@SOME
@given(T=st.integers(2, 40), lag=st.integers(0, 39), seed=st.integers(0, 2**16))
def test_fft_conv_with_a_unit_impulse_filter_delays_by_its_lag(T, lag, seed):
    lag = lag % T
    u = randn(2, T, 3, seed=seed)
    h = torch.zeros(T, 3, dtype=torch.float64)
    h[lag] = 1.0
    expected = torch.zeros_like(u)
    expected[:, lag:] = u[:, : T - lag]
    torch.testing.assert_close(fft_conv(u, h), expected, atol=1e-10, rtol=0)


@SOME
@given(T=st.integers(2, 60), data=st.data())
def test_fft_conv_is_causal(T, data):
    t = data.draw(st.integers(0, T - 2))
    u, h = randn(2, T, 4, seed=T), randn(T, 4, seed=T + 1)
    v = u.clone()
    v[:, t + 1 :] += randn(2, T - t - 1, 4, seed=t)
    a, b = fft_conv(u, h), fft_conv(v, h)
    torch.testing.assert_close(b[:, : t + 1], a[:, : t + 1], atol=1e-10, rtol=0)
    assert (a[:, t + 1] - b[:, t + 1]).abs().max() > 1e-6


def test_fft_conv_rejects_a_filter_of_the_wrong_length():
    with pytest.raises(ValueError, match="filter length"):
        fft_conv(torch.zeros(1, 5, 2), torch.zeros(4, 2))


# ------------------------------------------------------------------------------------------ LongConv


def long_conv(channels=6, max_len=32, seed=0, **kw) -> LongConv:
    torch.manual_seed(seed)
    return LongConv(channels, max_len, **kw).double()


@pytest.mark.parametrize("skip", [True, False])
@settings(max_examples=6, deadline=None)
@given(T=st.integers(1, 32), seed=st.integers(0, 2**16))
def test_step_form_equals_forward(skip, T, seed):
    conv = long_conv(seed=seed, skip=skip)
    u = randn(2, T, 6, seed=seed)
    with torch.no_grad():
        state = conv.init_state(2, dtype=u.dtype)
        steps = []
        for t in range(T):
            y, state = conv.step(u[:, t], state)
            steps.append(y)
        torch.testing.assert_close(torch.stack(steps, 1), conv(u), atol=1e-10, rtol=1e-10)
    assert state.shape == (2, T, 6)  # the state is the input history


def test_shorter_sequences_use_the_first_taps_of_the_same_filter():
    conv = long_conv()
    full = conv.filter(32)
    assert full.shape == (32, 6)
    # two FFT lengths: equal up to float64 rounding (1.4e-17 seen on AMD EPYC), not bit for bit
    torch.testing.assert_close(conv.filter(11), full[:11], atol=1e-14, rtol=1e-12)
    u = randn(1, 32, 6, seed=3)
    torch.testing.assert_close(conv(u[:, :11]), conv(u)[:, :11], atol=1e-12, rtol=0)


def test_filter_is_bounded_by_its_exponential_decay_window():
    """|sin| <= 1, so |h[t, c]| <= ||W_out[c]||_1 · window; the slowest window reaches 1e-2 at 1.5 L."""
    conv = long_conv(channels=8, max_len=64)
    with torch.no_grad():
        h = conv.filter(64)
        bound = conv.filter_out.weight.abs().sum(1) * 0.01 ** (1 / 1.5)
    assert (h[-1].abs() <= bound + 1e-12).all()
    # The fastest channel decays to 1e-2 by 0.3 L, the slowest is the least damped.
    assert (h[-1, -1].abs() <= conv.filter_out.weight[-1].abs().sum() * 0.01 ** (1 / 0.3) + 1e-12).all()


@pytest.mark.parametrize("skip", [True, False])
def test_skip_adds_the_input(skip):
    conv = long_conv(skip=skip)
    with torch.no_grad():
        conv.filter_out.weight.zero_()  # h = 0
    u = randn(2, 9, 6, seed=1)
    torch.testing.assert_close(conv(u), u if skip else torch.zeros_like(u), atol=0, rtol=0)


def test_longer_than_max_len_is_an_error():
    conv = long_conv(max_len=8)
    with pytest.raises(ValueError, match="max_len=8"):
        conv(torch.zeros(1, 9, 6, dtype=torch.float64))
    state = torch.zeros(1, 8, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match="max_len=8"):
        conv.step(torch.zeros(1, 6, dtype=torch.float64), state)


def test_every_parameter_gets_a_gradient():
    conv = long_conv()
    conv(randn(2, 20, 6, seed=2)).square().sum().backward()
    for name, p in conv.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_make_conv_long_builds_the_published_implicit_long_convolution():
    conv = make_conv("long", 12, 48)
    assert isinstance(conv, LongConv)
    assert (conv.channels, conv.max_len, conv.order, conv.skip) == (12, 48, 16, True)
    assert conv.filter_in.out_features == 16 and len(conv.filter_hidden) == 2
    assert conv.filter(48).shape == (48, 12)


def test_even_positional_feature_count_is_an_error():
    with pytest.raises(ValueError, match="emb_dim"):
        LongConv(4, 16, emb_dim=4)


def test_builds_on_the_meta_device_after_transformers_patched_linspace(monkeypatch):
    """transformers' `meta_device_safe_creation_ops` swaps `torch.linspace` for a wrapper while it loads a
    model; if torch's device context first lists its constructors then, the restored `torch.linspace` no
    longer follows `with torch.device(...)` for the rest of the process (the CI failure of 2026-12-07)."""
    from torch.utils import _device

    original = torch.linspace
    _device._device_constructors.cache_clear()
    monkeypatch.setattr(torch, "linspace", lambda *a, **k: original(*a, **k))
    _device._device_constructors()
    monkeypatch.setattr(torch, "linspace", original)
    try:
        with torch.device("meta"):
            conv = LongConv(8, 64)
        assert {b.device.type for b in conv.buffers()} == {"meta"}
    finally:
        _device._device_constructors.cache_clear()
