"""Hyena (order 2): published defaults, the long convolution's reach, the FFT path vs the quadratic one."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mecheval.models import ModelConfig, record
from mecheval.models.longconv import LongConv
from mecheval.models.mixers.hyena import Hyena, HyenaOptions
from mecheval.models.ops.fft_conv import fft_conv_direct
from mecheval.models.shortconv import ShortConv

from .conftest import MAX_LEN, build, make_config, random_tokens

D = 8


def hyena(d_conv=3, seed=0, max_len=MAX_LEN, **options) -> Hyena:
    torch.manual_seed(seed)
    return Hyena(D, d_conv, HyenaOptions(**options), 0, max_len).double()


def randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_published_defaults():
    lm = build(make_config("hyena", d_model=16))
    for block in lm.layers:
        m = block.mixer
        assert isinstance(m.conv, ShortConv) and m.conv.kernel_size == 3 and m.conv.channels == 3 * 16
        assert isinstance(m.long_conv, LongConv) and m.long_conv.channels == 16
        assert m.long_conv.order == 64 and m.long_conv.filter_in.out_features == 64
        assert not m.long_conv.skip  # the study's bias=False zeroes Hyena's filter bias
        assert m.long_conv.max_len == MAX_LEN
        assert m.in_proj.out_features == 3 * 16 and m.in_proj.bias is None and m.out_proj.bias is None


@pytest.mark.parametrize(
    "options,field", [({"filter_order": 0}, "filter_order"), ({"filter_emb_dim": 4}, "filter_emb_dim")]
)
def test_bad_options_name_the_field(options, field):
    with pytest.raises(ValidationError, match=field):
        ModelConfig(vocab_size=10, mixer="hyena", options={"hyena": options})


def test_options_reach_the_long_filter():
    m = hyena(filter_order=12, filter_emb_dim=5)
    assert m.long_conv.filter_in.in_features == 5 and m.long_conv.filter_in.out_features == 12


@pytest.mark.parametrize("d_conv", [0, 3, "long"])
@settings(max_examples=4, deadline=None)
@given(T=st.integers(1, MAX_LEN), seed=st.integers(0, 2**16))
def test_fft_forward_equals_the_quadratic_convolution(d_conv, T, seed):
    m = hyena(d_conv, seed)
    u = randn(2, T, D, seed=seed)
    calls = []

    def direct(u, h):
        calls.append(h.shape)
        return fft_conv_direct(u, h)

    with torch.no_grad():
        fast = m(u)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("mecheval.models.longconv.causal_conv", direct)
            slow = m(u)
    assert calls == [(T, 3 * D)] * (d_conv == "long") + [(T, D)]  # the patch took effect
    torch.testing.assert_close(fast, slow, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("d_conv", [0, 3])
def test_recurrent_equals_forward_at_full_length_and_longer_is_an_error(d_conv):
    m = hyena(d_conv, max_len=16)
    u = randn(2, 16, D, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(m.recurrent(u), m(u), atol=1e-10, rtol=1e-10)
    with pytest.raises(ValueError, match="max_len=16"):
        m(randn(1, 17, D, seed=2))


@pytest.mark.parametrize("d_conv", [0, 3])
def test_the_long_convolution_reaches_the_first_position(d_conv):
    """Even with a short conv of 3 (or none), the last output depends on the first input."""
    m = hyena(d_conv)
    u = randn(1, MAX_LEN, D, seed=4)
    v = u.clone()
    v[:, 0] += 1.0
    with torch.no_grad():
        assert (m(u)[:, -1] - m(v)[:, -1]).abs().max() > 1e-8


def test_core_out_is_the_long_convolution_before_gating_and_out_projection():
    lm = build(make_config("hyena", d_model=16))
    tokens = random_tokens(2, 10, 0)
    with torch.no_grad(), record(lm.sites(), ["layers.0.conv_out", "layers.0.core_out", "layers.0.mixer_out"]) as acts:
        lm(tokens)
    assert acts["layers.0.conv_out"].shape == (2, 10, 3 * 16)
    assert acts["layers.0.core_out"].shape == (2, 10, 16)
    m = lm.layers[0].mixer
    x1, x2, v = acts["layers.0.conv_out"].chunk(3, dim=-1)
    with torch.no_grad():
        torch.testing.assert_close(acts["layers.0.core_out"], m.long_conv(x1 * v))
        torch.testing.assert_close(acts["layers.0.mixer_out"], m.out_proj(x2 * acts["layers.0.core_out"]))


def test_every_parameter_gets_a_gradient():
    m = hyena(3)
    m(randn(2, 20, D, seed=5)).square().sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
