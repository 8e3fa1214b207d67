"""Mamba: published defaults, options, recurrent == parallel, the core_out site (conv slot, causality,
gradients: test_mixer_properties.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models import ModelConfig
from mecheval.models.mixers import MIXERS

from .mixer_checks import assert_recurrent_equals_parallel, inputs, make_mixer

FAST = settings(max_examples=8, deadline=None)


@pytest.mark.parametrize("d_model,dt_rank", [(16, 1), (64, 4), (100, 7), (256, 16)])
def test_published_defaults(d_model, dt_rank):
    m = make_mixer("mamba", d_model=d_model)
    assert (m.d_inner, m.d_state, m.dt_rank) == (2 * d_model, 16, dt_rank)
    assert m.conv.kernel_size == 4
    torch.testing.assert_close(-torch.exp(m.A_log), -torch.arange(1, 17.0).repeat(2 * d_model, 1))
    assert torch.equal(m.D, torch.ones(2 * d_model))
    dt = F.softplus(m.dt_proj.bias)
    assert dt.min() >= 1e-4 and dt.max() <= 0.1 + 1e-6
    spec = MIXERS["mamba"]
    assert (spec.default_conv, spec.default_mlp, spec.default_norm) == (4, False, "rmsnorm")
    cfg = ModelConfig(vocab_size=10, mixer="mamba")
    assert cfg.d_conv == [4, 4] and cfg.mlp == [False, False] and cfg.norm == ["rmsnorm"] * 2


def test_options_are_validated():
    with pytest.raises(ValueError, match="d_state"):
        ModelConfig(vocab_size=10, mixer="mamba", options={"mamba": {"d_state": 0}})
    with pytest.raises(ValueError, match="d_stat"):
        ModelConfig(vocab_size=10, mixer="mamba", options={"mamba": {"d_stat": 8}})


@pytest.mark.parametrize("conv", [0, 1, 4, "long"])
@FAST
@given(T=st.integers(1, 70), d_model=st.sampled_from([8, 16]), d_state=st.integers(1, 16), seed=st.integers(0, 999))
def test_recurrent_equals_parallel(conv, T, d_model, d_state, seed):
    m = make_mixer("mamba", d_model=d_model, conv=conv, max_len=70, seed=seed, d_state=d_state)
    assert_recurrent_equals_parallel(m, inputs(2, T, d_model, seed))


def test_core_out_is_the_ssm_output_before_the_gate():
    m = make_mixer("mamba")
    x = inputs(2, 9, 16, 0)
    seen = {}
    m.core_out.register_forward_hook(lambda _m, _i, out: seen.setdefault("core", out))
    m.conv_out.register_forward_hook(lambda _m, _i, out: seen.setdefault("conv", out))
    y = m(x)
    assert seen["core"].shape == (2, 9, 32) and seen["conv"].shape == (2, 9, 32)
    z = m.in_proj(x).chunk(2, -1)[1]
    torch.testing.assert_close(y, m.out_proj(seen["core"] * F.silu(z)))


def test_conv_bias_is_added_after_the_conv_with_conv1d_init():
    plain = make_mixer("mamba", conv=4, seed=3)
    biased = make_mixer("mamba", conv=4, seed=3, conv_bias=True)
    assert plain.conv_bias is None and biased.conv_bias.shape == (32,)
    assert biased.conv_bias.abs().max() <= 0.5 and biased.conv_bias.std() > 0.2  # U(±1/sqrt(4)): std 0.29
    biased.load_state_dict({**plain.state_dict(), "conv_bias": biased.conv_bias.detach()})
    x = inputs(2, 9, 16, 0)
    seen = {}
    plain.conv_out.register_forward_hook(lambda _m, _i, out: seen.setdefault("plain", out))
    biased.conv_out.register_forward_hook(lambda _m, _i, out: seen.setdefault("biased", out))
    y_plain, y_biased = plain(x), biased(x)
    torch.testing.assert_close(seen["biased"], seen["plain"] + biased.conv_bias)
    assert (y_plain - y_biased).abs().max() > 1e-3


@pytest.mark.parametrize("conv", [1, 4])
def test_recurrent_equals_parallel_with_conv_bias(conv):
    m = make_mixer("mamba", conv=conv, conv_bias=True)
    assert_recurrent_equals_parallel(m, inputs(2, 13, 16, 1))


@pytest.mark.parametrize("conv", [0, "long"])
def test_conv_bias_needs_a_short_conv(conv):
    with pytest.raises(ValueError, match="conv_bias"):
        make_mixer("mamba", conv=conv, conv_bias=True)
