"""BaseConv: y = conv(u) ⊙ (W u) + u, its receptive field for each `d_conv`, and the published preset."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models import ModelConfig, record
from mecheval.models.longconv import LongConv
from mecheval.models.mixers.baseconv import BaseConv, BaseConvOptions
from mecheval.models.shortconv import ShortConv

from .conftest import MAX_LEN, VOCAB, build, random_tokens

D = 8


def baseconv(d_conv, seed=0, max_len=MAX_LEN) -> BaseConv:
    torch.manual_seed(seed)
    return BaseConv(D, d_conv, BaseConvOptions(), 0, max_len).double()


def randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_the_published_preset_is_short_conv_3_then_long():
    cfg = ModelConfig(preset="baseconv", vocab_size=VOCAB, d_model=16, max_len=MAX_LEN)
    assert cfg.mixer == ["baseconv", "baseconv"] and cfg.d_conv == [3, "long"] and cfg.mlp == [True, True]
    lm = build(cfg)
    first, second = (b.mixer for b in lm.layers)
    assert isinstance(first.conv, ShortConv) and first.conv.kernel_size == 3
    assert isinstance(second.conv, LongConv) and second.conv.skip and second.conv.max_len == MAX_LEN
    # No in- or out-projection: one D x D gate and the conv are all the parameters.
    for m in (first, second):
        assert m.proj.bias is None
        assert sum(p.numel() for p in m.parameters()) == 16 * 16 + sum(p.numel() for p in m.conv.parameters())
    tokens = random_tokens(2, 20, 0)
    with torch.no_grad():
        torch.testing.assert_close(lm.recurrent(tokens), lm(tokens), atol=1e-4, rtol=0)


@pytest.mark.parametrize("d_conv", [0, 1, 3, "long"])
def test_zero_gate_leaves_the_identity(d_conv):
    m = baseconv(d_conv)
    with torch.no_grad():
        m.proj.weight.zero_()
    u = randn(2, 9, D, seed=0)
    torch.testing.assert_close(m(u), u, atol=0, rtol=0)


@pytest.mark.parametrize("d_conv", [0, 1, 2, 3, 4])
@settings(max_examples=5, deadline=None)
@given(T=st.integers(6, 20), data=st.data())
def test_output_at_t_sees_exactly_the_last_d_conv_inputs(d_conv, T, data):
    """d_conv 0 is pointwise (the conv is removed); a short conv of k sees u[t-k+1 .. t]."""
    t = data.draw(st.integers(5, T - 1))
    m = baseconv(d_conv, seed=T)
    u = randn(1, T, D, seed=t)
    reach = max(d_conv, 1)
    v = u.repeat(t + 1, 1, 1)
    v[torch.arange(t + 1), torch.arange(t + 1)] += 1.0  # sequence s perturbs position s
    with torch.no_grad():
        changed = (m(v)[:, t] - m(u)[:, t]).abs().amax(-1) > 1e-9  # [t + 1]
    assert changed.tolist() == [s > t - reach for s in range(t + 1)], (t, d_conv)


def test_long_conv_reaches_the_first_position():
    m = baseconv("long")
    u = randn(1, MAX_LEN, D, seed=1)
    v = u.clone()
    v[0, 0] += 1.0
    with torch.no_grad():
        assert (m(u)[0, -1] - m(v)[0, -1]).abs().max() > 1e-8


@pytest.mark.parametrize("d_conv", [0, 3, "long"])
def test_recurrent_equals_forward_at_full_length(d_conv):
    m = baseconv(d_conv, max_len=16)
    u = randn(2, 16, D, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(m.recurrent(u), m(u), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("d_conv", [0, 3, "long"])
def test_sites_are_the_conv_and_the_gated_conv_before_the_residual(d_conv):
    cfg = ModelConfig(mixer="baseconv", d_conv=d_conv, n_layers=1, vocab_size=VOCAB, d_model=16, max_len=MAX_LEN)
    lm = build(cfg)
    names = [n for n in lm.sites() if n.split(".")[-1] in ("mixer_in", "conv_out", "core_out", "mixer_out")]
    assert names == ["layers.0.mixer_in"] + ["layers.0.conv_out"] * (d_conv != 0) + [
        "layers.0.core_out",
        "layers.0.mixer_out",
    ]
    with torch.no_grad(), record(lm.sites(), names) as a:
        lm(random_tokens(2, 11, 3))
    u, m = a["layers.0.mixer_in"], lm.layers[0].mixer
    c = a["layers.0.conv_out"] if d_conv != 0 else u
    assert c.shape == (2, 11, 16)
    with torch.no_grad():
        torch.testing.assert_close(a["layers.0.core_out"], c * m.proj(u))
    torch.testing.assert_close(a["layers.0.mixer_out"], a["layers.0.core_out"] + u)


@pytest.mark.parametrize("d_conv", [3, "long"])
def test_every_parameter_gets_a_gradient(d_conv):
    m = baseconv(d_conv)
    m(randn(2, 20, D, seed=5)).square().sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
