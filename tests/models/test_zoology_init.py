"""`init: zoology` (the study's init for Mamba, attention and Based LMs), `build: study` and `final_norm`; the default
init is unchanged."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mecheval.models import ModelConfig

from .conftest import build, make_config, random_tokens


def mamba_lm(init: str, d_model: int = 64, n_layers: int = 2, **kw):
    return build(make_config("mamba", d_model=d_model, n_layers=n_layers, vocab_size=4096, init=init, **kw))


def test_zoology_embeddings_are_small_and_unscaled():
    lm = mamba_lm("zoology", pos_emb="learned")
    assert lm.embed.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert lm.pos.weight.std().item() == pytest.approx(0.02, rel=0.1)
    tokens = random_tokens(2, 7, 0)
    torch.testing.assert_close(lm.embed_tokens(tokens), lm.embed(tokens) + lm.pos.weight[:7])


def test_default_init_is_unit_scale():
    lm = mamba_lm("mecheval", pos_emb="learned")
    assert lm.embed.weight.std().item() == pytest.approx(64**-0.5, rel=0.05)
    assert lm.pos.weight.std().item() == pytest.approx(1.0, rel=0.1)
    tokens = random_tokens(2, 7, 0)
    torch.testing.assert_close(lm.embed_tokens(tokens), 8 * lm.embed(tokens) + lm.pos.weight[:7])


@pytest.mark.parametrize("n_layers", [1, 2, 4])
def test_zoology_rescales_each_out_proj_by_sqrt_n_layers(n_layers):
    zoo, ours = mamba_lm("zoology", n_layers=n_layers), mamba_lm("mecheval", n_layers=n_layers)
    bound = 128**-0.5  # PyTorch's default for a Linear with fan_in = d_inner = 128
    for z, o in zip(zoo.layers, ours.layers):
        wz, wo = z.mixer.out_proj.weight, o.mixer.out_proj.weight
        assert wz.abs().max() <= bound / math.sqrt(n_layers) + 1e-7
        assert wz.std().item() == pytest.approx(bound / math.sqrt(3 * n_layers), rel=0.05)  # U(±b): std b/sqrt(3)
        assert wo.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)
        dt = F.softplus(z.mixer.dt_proj.bias)  # the Δ bias keeps mamba_ssm's init (zoology's _no_reinit)
        assert dt.min() >= 1e-4 and dt.max() <= 0.1 + 1e-6


@pytest.mark.parametrize("n_layers", [1, 2, 4])
def test_zoology_init_of_attention_blocks_is_gpt2s(n_layers):
    """zoology's TransformerBlock init: Linears N(0, 0.02²), the residual projections N(0, 0.02² / (2 n_layers))."""
    lm = build(make_config("attention", d_model=64, n_layers=n_layers, vocab_size=4096, init="zoology", block_bias=True,
                           options={"attention": {"out_bias": True}}))
    assert lm.embed_scale == 1.0 and lm.embed.weight.std().item() == pytest.approx(0.02, rel=0.05)
    for block in lm.layers:
        for w in (block.mixer.qkv.weight, block.mlp.up.weight):
            assert w.std().item() == pytest.approx(0.02, rel=0.05)
        for w in (block.mixer.out.weight, block.mlp.down.weight):
            assert w.std().item() == pytest.approx(0.02 / math.sqrt(2 * n_layers), rel=0.05)
        for bias in (block.mixer.out.bias, block.mlp.up.bias, block.mlp.down.bias, block.norm1.bias, block.norm2.bias):
            assert bias is not None and not bias.any()
    default = build(make_config("attention", d_model=64, n_layers=n_layers, vocab_size=4096))
    assert default.layers[0].mixer.out.bias is None and default.layers[0].norm1.bias is None
    assert default.layers[0].mixer.out.weight.std().item() == pytest.approx(64**-0.5 / math.sqrt(3), rel=0.05)


def test_zoology_init_is_for_the_study_codes_blocks_only():
    with pytest.raises(ValueError, match="init 'zoology' is the study's scheme for mamba, attention, based, baseconv blocks only"):
        ModelConfig(vocab_size=10, mixer="hyena", init="zoology")
    with pytest.raises(ValueError, match="init"):
        ModelConfig(vocab_size=10, mixer="mamba", init="gpt2")


def test_study_build_of_attention_has_the_study_codes_parameters():
    """The study's attention LM at d = 64 on ATR easy (tinylang's vocabulary of 26) has 166,912 parameters: token and
    position tables, per layer LayerNorms with biases, W_qkv without a bias, W_o and the MLP with biases, and a
    final LayerNorm with a bias (its count read off the study's code, docs/findings/atr.md)."""
    cfg = make_config("attention", d_model=64, vocab_size=26, max_len=1024, build="study")
    assert (cfg.init, cfg.block_bias, cfg.final_norm_bias, cfg.norm_eps) == ("zoology", True, True, 1e-5)
    assert cfg.options == {"attention": {"out_bias": True}}
    assert sum(p.numel() for p in build(cfg).parameters()) == 166_912
    ours = build(make_config("attention", d_model=64, vocab_size=26, max_len=1024))
    assert sum(p.numel() for p in ours.parameters()) == 166_912 - 2 * (2 * 64 + 64 + 256 + 64) - 64  # no biases


@pytest.mark.parametrize("vocab, study_count", [(8196, 604_992), (26, 82_112)])
def test_study_build_of_based_has_the_study_codes_parameters_and_init(vocab, study_count):
    """The study's Based (tinylang's Hybrid: BaseConv, then Based, each in zoology's TransformerBlock) at d = 64 with
    its AR (8,196) and ATR (26) vocabularies: 64·V + 80,448 parameters, ours without the study's biases 1,088
    fewer (BaseConv's Conv1d and projection, the MLPs', the LayerNorms'); every Linear N(0, 0.02²), the MLPs' W_2
    rescaled to 0.01 and Based's output projection not (zoology's name test misses its `proj_o`), the conv's taps
    and bias U(±1/√3) (its Conv1d's own draw). Logits and gradients equal the study's code's to 1e-15 in float64,
    its weights copied in (docs/based-study-build.md; a check run against its code, not part of this suite)."""
    cfg = make_config("preset:based", d_model=64, vocab_size=vocab, build="study")
    assert (cfg.init, cfg.block_bias, cfg.final_norm_bias) == ("zoology", True, True)
    assert cfg.options == {"baseconv": {"conv_bias": True, "proj_bias": True}}  # no attention option: not a mixer here
    lm = build(cfg)
    assert sum(p.numel() for p in lm.parameters()) == study_count == 64 * vocab + 80_448
    ours = build(make_config("preset:based", d_model=64, vocab_size=vocab))
    assert sum(p.numel() for p in ours.parameters()) == study_count - 1_088
    baseconv, based = (block.mixer for block in lm.layers)
    for w in (baseconv.proj.weight, based.proj_q.weight, based.proj_v.weight, based.out.weight, lm.layers[0].mlp.up.weight):
        assert w.std().item() == pytest.approx(0.02, rel=0.1)
    for block in lm.layers:
        assert block.mlp.down.weight.std().item() == pytest.approx(0.01, rel=0.1)
    assert not baseconv.proj.bias.any() and baseconv.conv_bias.abs().max() <= 3**-0.5
    assert baseconv.conv_bias.std().item() == pytest.approx(3**-0.5 / math.sqrt(3), rel=0.25)


def test_baseconv_biases_enter_the_conv_and_the_gate_in_both_views():
    """BaseConv's `conv_bias` is added to the conv output (site `conv_out`), `proj_bias` to the gate; the recurrent
    view steps both; a conv bias needs a short conv."""
    options = {"conv_bias": True, "proj_bias": True}
    lm = build(make_config("preset:based", d_model=16, vocab_size=32, options={"baseconv": options}))
    mixer, tokens = lm.layers[0].mixer, random_tokens(2, 9, 0)
    with torch.no_grad():
        mixer.conv_bias.fill_(0.5)
        mixer.proj.bias.fill_(0.25)
        x = torch.randn(2, 9, 16)
        torch.testing.assert_close(mixer.recurrent(x), mixer(x))
    _, cache = lm.run_with_cache(tokens, ["layers.0.conv_out", "layers.0.resid_mid"])
    u = lm.layers[0].norm1(lm.embed_tokens(tokens))
    torch.testing.assert_close(cache["layers.0.conv_out"], mixer.conv(u) + 0.5)
    with pytest.raises(ValueError, match="baseconv conv_bias needs a short conv"):
        build(make_config("baseconv", "long", d_model=16, vocab_size=32, options={"baseconv": options}))
    with pytest.raises(ValueError, match="does not rebuild the study's implicit long conv"):
        make_config("preset:baseconv", d_model=16, vocab_size=32, build="study")


def test_final_norm_defaults_to_the_last_layers_and_can_be_set():
    assert ModelConfig(vocab_size=10, mixer="mamba").final_norm == "rmsnorm"
    assert ModelConfig(vocab_size=10, mixer="attention").final_norm == "layernorm"
    lm = mamba_lm("mecheval", final_norm="layernorm")
    assert isinstance(lm.norm_f, nn.LayerNorm) and isinstance(lm.layers[0].norm1, nn.RMSNorm)
    with pytest.raises(ValueError, match="final_norm"):
        ModelConfig(vocab_size=10, mixer="mamba", final_norm="batchnorm")


def test_norm_eps_reaches_every_norm_and_defaults_to_torchs():
    default, study = mamba_lm("zoology", final_norm="layernorm"), mamba_lm("zoology", final_norm="layernorm", norm_eps=1e-5)
    assert [blk.norm1.eps for blk in default.layers] == [None, None] and default.norm_f.eps == 1e-5  # torch's
    assert [blk.norm1.eps for blk in study.layers] == [1e-5, 1e-5] and study.norm_f.eps == 1e-5
    tokens = random_tokens(4, 9, 1)
    # at the study's init the residual stream has mean square ~ 4e-4: eps 1e-5 visibly changes the logits
    assert not torch.allclose(default(tokens), study(tokens), atol=1e-3)


def test_final_norm_bias_is_a_layernorm_bias():
    lm = mamba_lm("zoology", final_norm="layernorm", final_norm_bias=True)
    assert isinstance(lm.norm_f, nn.LayerNorm) and lm.norm_f.bias is not None
    assert mamba_lm("zoology", final_norm="layernorm").norm_f.bias is None
    with pytest.raises(ValueError, match="final_norm_bias needs final_norm 'layernorm'"):
        ModelConfig(preset="mamba", vocab_size=64, final_norm_bias=True)


def test_study_build_is_the_published_fields_and_explicit_fields_win():
    explicit = dict(init="zoology", final_norm="layernorm", final_norm_bias=True, norm_eps=1e-5,
                    options={"mamba": {"conv_bias": True}})
    a = build(make_config("mamba", d_model=64, vocab_size=4096, build="study"))
    b = build(make_config("mamba", d_model=64, vocab_size=4096, **explicit))
    tokens = random_tokens(3, 11, 2)
    assert torch.equal(a(tokens), b(tokens))  # the same fields, the same draws: the same model bit for bit
    cfg = make_config("mamba", 0, vocab_size=4096, build="study", norm_eps=1e-6)
    assert cfg.norm_eps == 1e-6 and "conv_bias" not in cfg.options.get("mamba", {})  # no conv, no conv bias
    with pytest.raises(ValueError, match="build 'study'"):
        make_config("hyena", build="study")


def test_zoology_init_of_a_hybrid_inits_each_block_by_its_own_type():
    lm = build(ModelConfig(vocab_size=64, d_model=64, mixer=["mamba", "attention"], init="zoology"))
    mamba, attention = lm.layers
    assert mamba.mixer.out_proj.weight.abs().max() <= 128**-0.5 / math.sqrt(2) + 1e-7  # MambaBlock: kaiming / sqrt(n)
    assert attention.mixer.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)  # TransformerBlock: N(0, 0.02²)
    assert attention.mixer.out.weight.std().item() == pytest.approx(0.01, rel=0.1)
