"""H3: published defaults (our reading of "state 1024, head dim 2"), the shift SSM as the shared short
conv, recurrent == parallel, the core_out site (conv slot, causality, gradients:
test_mixer_properties.py)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models import ModelConfig
from mecheval.models.mixers import MIXERS
from mecheval.models.shortconv import ShortConv

from .mixer_checks import FAST_OPTIONS, assert_recurrent_equals_parallel, inputs, make_mixer

FAST = settings(max_examples=6, deadline=None)
SMALL = FAST_OPTIONS["h3"]


def test_published_defaults():
    m = make_mixer("h3", d_model=64)
    assert (m.n_heads, m.d_head, m.n_modes) == (32, 2, 512)
    assert m.conv.kernel_size == 1024  # the shift SSM of state 1024
    spec = MIXERS["h3"]
    assert (spec.default_conv, spec.default_mlp, spec.default_norm) == (1024, True, "layernorm")
    assert ModelConfig(vocab_size=10, mixer="h3").d_conv == [1024, 1024]
    with pytest.raises(ValueError, match="d_state"):
        ModelConfig(vocab_size=10, mixer="h3", options={"h3": {"d_state": 7}})


def test_shift_ssm_is_a_causal_conv_of_its_state_size():
    """h_t = S h_{t-1} + e_1 k_t (S the shift), k̄_t = C·h_t + D k_t equals ShortConv with taps C (lag j ->
    weight[-1 - j]) and D added at lag 0."""
    N, Ch, T = 5, 3, 12
    g = torch.Generator().manual_seed(0)
    C, D, k = torch.randn(Ch, N, generator=g), torch.randn(Ch, generator=g), torch.randn(2, T, Ch, generator=g)
    h, expect = torch.zeros(2, Ch, N), []
    for t in range(T):
        h = torch.cat([k[:, t, :, None], h[..., :-1]], dim=-1)
        expect.append((C * h).sum(-1) + D * k[:, t])
    conv = ShortConv(Ch, N)
    with torch.no_grad():
        conv.weight.copy_(C.flip(-1)[:, None])
        conv.weight[:, 0, -1] += D
        torch.testing.assert_close(conv(k), torch.stack(expect, 1))


@pytest.mark.parametrize("conv", [0, 2, 1024, "long"])  # 1024: longer than the sequence; FFT beyond 32 taps
@FAST
@given(T=st.integers(1, 40), head_dim=st.sampled_from([1, 2, 4]), seed=st.integers(0, 999))
def test_recurrent_equals_parallel(conv, T, head_dim, seed):
    m = make_mixer("h3", conv=conv, seed=seed, head_dim=head_dim, **SMALL)
    assert_recurrent_equals_parallel(m, inputs(2, T, 16, seed))


def test_recurrent_equals_parallel_at_the_published_sizes():
    m = make_mixer("h3", d_model=16, max_len=1024)  # d_state 1024, head_dim 2, shift state 1024
    assert_recurrent_equals_parallel(m, inputs(2, 37, 16, 0))


def test_core_out_holds_the_ssm_of_every_key_value_entry():
    m = make_mixer("h3", d_model=16, head_dim=2, **SMALL)
    seen = {}
    m.core_out.register_forward_hook(lambda _m, _i, out: seen.setdefault("core", out))
    m.conv_out.register_forward_hook(lambda _m, _i, out: seen.setdefault("conv", out))
    with torch.no_grad():
        m(inputs(3, 7, 16, 0))
    assert seen["core"].shape == (3, 7, 32) and seen["conv"].shape == (3, 7, 16)  # [B, T, D d_h], [B, T, D]
