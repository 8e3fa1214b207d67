"""Based linear attention: the Taylor feature map, the chunked form vs the quadratic and recurrent forms,
and the published Based hybrid (BaseConv layer 0, Based layer 1)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mecheval.models import ModelConfig, record
from mecheval.models.mixers.based import Based, BasedOptions, taylor_features
from mecheval.models.mixers.baseconv import BaseConv
from mecheval.models.ops.linear_attention import causal_linear_attention, causal_linear_attention_quadratic
from mecheval.models.shortconv import ShortConv

from .conftest import MAX_LEN, VOCAB, build, make_config, random_tokens

SOME = settings(max_examples=20, deadline=None)
D = 8


def randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def based(seed=0, **options) -> Based:
    torch.manual_seed(seed)
    return Based(D, 0, BasedOptions(**options), 1, MAX_LEN).double()


@SOME
@given(F=st.integers(1, 10), seed=st.integers(0, 2**16))
def test_taylor_features_give_the_second_order_expansion_of_exp(F, seed):
    q, k = randn(5, F, seed=seed), randn(5, F, seed=seed + 1)
    fq, fk = taylor_features(q), taylor_features(k)
    assert fq.shape == (5, 1 + F + F * F)
    s = (q * k).sum(-1) / math.sqrt(F)
    torch.testing.assert_close((fq * fk).sum(-1), 1 + s + s**2 / 2, atol=1e-10, rtol=1e-10)


@SOME
@given(
    B=st.integers(1, 2),
    H=st.integers(1, 2),
    T=st.integers(1, 50),
    P=st.integers(1, 6),
    Dv=st.integers(1, 5),
    chunk=st.integers(1, 20),
    seed=st.integers(0, 2**16),
)
def test_chunked_linear_attention_equals_the_quadratic_form(B, H, T, P, Dv, chunk, seed):
    q, k = randn(B, H, T, P, seed=seed).abs(), randn(B, H, T, P, seed=seed + 1).abs()  # positive scores
    v = randn(B, H, T, Dv, seed=seed + 2)
    torch.testing.assert_close(
        causal_linear_attention(q, k, v, chunk_size=chunk),
        causal_linear_attention_quadratic(q, k, v),
        atol=1e-10,
        rtol=1e-10,
    )


@pytest.mark.parametrize("n_heads", [1, 2])
@settings(max_examples=5, deadline=None)
@given(T=st.integers(1, MAX_LEN), chunk=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_chunked_forward_equals_recurrent_form(n_heads, T, chunk, seed):
    m = based(seed, n_heads=n_heads, chunk_size=chunk)
    x = randn(2, T, D, seed=seed)
    with torch.no_grad():
        torch.testing.assert_close(m.recurrent(x), m(x), atol=1e-10, rtol=1e-10)
    S, z = m.init_state(2, dtype=x.dtype)
    assert S.shape == (2, n_heads, 1 + 8 + 64, D // n_heads) and z.shape == (2, n_heads, 73)


def test_float32_chunked_forward_matches_the_step_form_at_length_1024():
    torch.manual_seed(0)
    m = Based(16, 0, BasedOptions(), 1, 1024)
    x = torch.randn(2, 1024, 16)
    with torch.no_grad():
        torch.testing.assert_close(m.recurrent(x), m(x), atol=1e-4, rtol=1e-4)


def test_published_defaults_and_no_convolution():
    opts = BasedOptions()
    assert (opts.feature_dim, opts.n_heads) == (8, 1)
    m = Based(16, 0, opts, 1, MAX_LEN)
    assert m.proj_q.out_features == 8 and m.proj_k.out_features == 8 and m.proj_v.out_features == 16
    assert not hasattr(m, "conv_out")
    with pytest.raises(ValidationError, match="d_conv"):
        ModelConfig(vocab_size=10, mixer="based", d_conv=3)
    with pytest.raises(ValidationError, match="n_heads"):
        ModelConfig(vocab_size=10, mixer="based", options={"based": {"n_heads": 0}})


def test_the_published_hybrid_is_baseconv_then_based():
    cfg = ModelConfig(preset="based", vocab_size=VOCAB, d_model=16, max_len=MAX_LEN)
    assert cfg.mixer == ["baseconv", "based"] and cfg.d_conv == [3, 0] and cfg.pos_emb == "none"
    lm = build(cfg)
    first, second = (b.mixer for b in lm.layers)
    assert isinstance(first, BaseConv) and isinstance(first.conv, ShortConv) and first.conv.kernel_size == 3
    assert isinstance(second, Based)
    assert [n for n in lm.sites() if n.endswith("conv_out")] == ["layers.0.conv_out"]
    tokens = random_tokens(2, 20, 0)
    with torch.no_grad():
        torch.testing.assert_close(lm.recurrent(tokens), lm(tokens), atol=1e-4, rtol=0)


def test_core_out_is_the_normalised_attention_before_the_out_projection():
    lm = build(make_config("preset:based"))
    with torch.no_grad(), record(lm.sites(), ["layers.1.mixer_in", "layers.1.core_out", "layers.1.mixer_out"]) as a:
        lm(random_tokens(2, 12, 1))
    m = lm.layers[1].mixer
    x = a["layers.1.mixer_in"]
    q, k, v = (z.transpose(1, 2) for z in m._qkv(x))
    with torch.no_grad():
        ref = causal_linear_attention_quadratic(q, k, v).transpose(1, 2).reshape(x.shape)
        torch.testing.assert_close(a["layers.1.core_out"], ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a["layers.1.mixer_out"], m.out(a["layers.1.core_out"]))


def test_every_parameter_gets_a_gradient():
    m = based(chunk_size=4)
    m(randn(2, 13, D, seed=3)).square().sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
