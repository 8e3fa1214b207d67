"""DeltaNet: published defaults, recurrent == parallel (across chunk boundaries), the core_out site
(conv slot, causality, gradients: test_mixer_properties.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models import ModelConfig
from mecheval.models.mixers import MIXERS
from mecheval.models.ops.delta_rule import delta_rule_loop

from .mixer_checks import assert_recurrent_equals_parallel, inputs, make_mixer

FAST = settings(max_examples=8, deadline=None)


def test_published_defaults():
    m = make_mixer("deltanet", d_model=64)
    assert (m.n_heads, m.d_head) == (1, 64)
    assert m.conv.kernel_size == 4 and m.conv.channels == 3 * 64  # one short conv each on q, k, v
    spec = MIXERS["deltanet"]
    assert (spec.default_conv, spec.default_mlp, spec.default_norm) == (4, True, "layernorm")
    assert ModelConfig(vocab_size=10, mixer="deltanet").d_conv == [4, 4]


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="n_heads"):
        make_mixer("deltanet", d_model=10, n_heads=3)


@pytest.mark.parametrize("conv", [0, 1, 4, "long"])
@FAST
@given(T=st.integers(1, 80), n_heads=st.sampled_from([1, 2, 4]), seed=st.integers(0, 999))
def test_recurrent_equals_parallel(conv, T, n_heads, seed):
    m = make_mixer("deltanet", conv=conv, max_len=80, seed=seed, n_heads=n_heads)
    assert_recurrent_equals_parallel(m, inputs(2, T, 16, seed))


def test_core_out_is_the_delta_rule_readout_of_normalised_queries_and_keys():
    m = make_mixer("deltanet", conv=0, n_heads=2)
    x = inputs(2, 12, 16, 1)
    seen = {}
    m.core_out.register_forward_hook(lambda _m, _i, out: seen.setdefault("core", out))
    with torch.no_grad():
        m(x)
        q, k, v = (z.unflatten(-1, (2, 8)) for z in F.silu(m.qkv(x)).chunk(3, -1))
        beta = torch.sigmoid(m.b_proj(x))
        expect = delta_rule_loop(F.normalize(q, dim=-1) / 8**0.5, F.normalize(k, dim=-1), v, beta)
    torch.testing.assert_close(seen["core"], expect.flatten(-2), atol=1e-5, rtol=1e-5)
