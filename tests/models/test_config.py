"""ModelConfig: errors that name the field, published defaults, presets, and dump/validate round-trips."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mecheval.models import ARCHITECTURES, MIXERS, ModelConfig, build_model

from .conftest import ARCHS, arch_convs, make_config


def cfg(**kw) -> ModelConfig:
    return ModelConfig(vocab_size=10, **kw)


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(mixer="transformer"), "unknown mixer 'transformer'"),
        (dict(mixer=["attention", "nope"]), "unknown mixer 'nope'"),
        (dict(mixer=["attention"] * 3), "mixer lists 3 values but n_layers=2"),
        (dict(mixer="mamba", d_conv=[4]), "d_conv lists 1 values but n_layers=2"),
        (dict(mlp=[True, False, True]), "mlp lists 3 values"),
        (dict(norm=["rmsnorm"]), "norm lists 1 values"),
        (dict(mixer="mamba", d_conv=-1), "d_conv"),
        (dict(mixer="mamba", d_conv=2.5), "d_conv"),
        (dict(mixer="mamba", d_conv="short"), "d_conv"),
        (dict(mixer="mamba", d_conv=True), "d_conv"),
        (dict(mixer="mamba", d_conv=[4, -2]), "d_conv"),
        (dict(mixer="attention", d_conv=3), "d_conv: layer 0 mixer 'attention' has no convolution"),
        (dict(mixer=["mamba", "attention"], d_conv=4), "d_conv: layer 1 mixer 'attention'"),
        (dict(options={"transformer": {}}), "options.transformer: unknown mixer 'transformer'"),
        (dict(options={"attention": {"n_head": 2}}), "options.attention(.|\n)*n_head"),
        (dict(options={"attention": {"n_heads": "two"}}), "options.attention(.|\n)*n_heads"),
        (dict(norm="batchnorm"), "norm"),
        (dict(pos_emb="rotary"), "pos_emb"),
        (dict(d_model=0), "d_model"),
        (dict(n_layers=0), "n_layers"),
        (dict(dropout=0.1), "dropout"),
        (dict(preset="gpt2"), "unknown preset 'gpt2'"),
        (dict(preset="based", n_layers=3), "lists 2 values but n_layers=3"),
    ],
)
def test_invalid_configs_raise_naming_the_field(kw, field):
    with pytest.raises(ValidationError, match=field):
        cfg(**kw)


@pytest.mark.parametrize("mixer", [m for m in MIXERS if not MIXERS[m].has_conv])
@pytest.mark.parametrize("conv", [1, 4, "long"])
def test_a_mixer_without_a_conv_slot_rejects_one_when_built_directly(mixer, conv):
    spec = MIXERS[mixer]
    with pytest.raises(ValueError, match="has no short convolution: d_conv must be 0"):
        spec.cls(16, conv, spec.options(), layer_idx=0, max_len=8)
    spec.cls(16, 0, spec.options(), layer_idx=0, max_len=8)  # and accepts none


@pytest.mark.parametrize("mixer", [m for m in MIXERS if MIXERS[m].has_conv])
def test_every_conv_mixer_accepts_every_d_conv(mixer):
    assert [cfg(mixer=mixer, d_conv=c).d_conv for c in (0, 1, 4, "long")] == [[0] * 2, [1] * 2, [4] * 2, ["long"] * 2]


# preset -> (mixers, d_conv, mlp, norm, pos_emb). H3's shift SSM of state 1024 is a conv of kernel 1024.
PUBLISHED = {
    "attention": (["attention"] * 2, [0, 0], [True] * 2, ["layernorm"] * 2, "learned"),
    "mamba": (["mamba"] * 2, [4, 4], [False] * 2, ["rmsnorm"] * 2, "none"),
    "deltanet": (["deltanet"] * 2, [4, 4], [True] * 2, ["layernorm"] * 2, "none"),
    "h3": (["h3"] * 2, [1024, 1024], [True] * 2, ["layernorm"] * 2, "none"),
    "hyena": (["hyena"] * 2, [3, 3], [True] * 2, ["layernorm"] * 2, "none"),
    "baseconv": (["baseconv"] * 2, [3, "long"], [True] * 2, ["layernorm"] * 2, "none"),
    "based": (["baseconv", "based"], [3, 0], [True] * 2, ["layernorm"] * 2, "none"),
    "mamba2": (["mamba2"] * 2, [4, 4], [False] * 2, ["rmsnorm"] * 2, "none"),
    "mamba3": (["mamba3"] * 2, [0, 0], [False] * 2, ["rmsnorm"] * 2, "none"),
    "gated-deltanet": (["gated-deltanet"] * 2, [4, 4], [True] * 2, ["layernorm"] * 2, "none"),
    "gla": (["gla"] * 2, [0, 0], [True] * 2, ["rmsnorm"] * 2, "none"),
    "rwkv7": (["rwkv7"] * 2, [0, 0], [True] * 2, ["rmsnorm"] * 2, "none"),
    "deltaproduct": (["deltaproduct"] * 2, [4, 4], [True] * 2, ["rmsnorm"] * 2, "none"),
}


@pytest.mark.parametrize("preset", sorted(ARCHITECTURES))
def test_presets_resolve_to_the_published_defaults(preset):
    c = cfg(preset=preset)
    mixers, d_conv, mlp, norm, pos_emb = PUBLISHED[preset]
    assert (c.mixer, c.d_conv, c.mlp, c.norm, c.pos_emb, c.n_layers) == (mixers, d_conv, mlp, norm, pos_emb, 2)
    assert c.tie_embeddings
    assert c == cfg(mixer=mixers, d_conv=c.d_conv).model_copy(update={"preset": preset})


PUBLISHED_OPTIONS = {
    "attention": {"n_heads": 1},
    "mamba": {"d_state": 16, "expand": 2},
    "deltanet": {"n_heads": 1},
    "h3": {"d_state": 1024, "head_dim": 2},
    "hyena": {"filter_order": 64},
    "based": {"feature_dim": 8, "n_heads": 1},
    "baseconv": {},
    "mamba2": {"d_state": 16, "expand": 2, "head_dim": 16},
    "mamba3": {"d_state": 16, "expand": 2, "head_dim": 16},
    "gated-deltanet": {"n_heads": 1},
    "gla": {"n_heads": 4, "expand_k": 0.5, "expand_v": 1.0, "gate_rank": 16, "gate_normalizer": 16.0},
    "rwkv7": {"n_heads": 1, "decay_rank": 32, "token_shift": True},
    "deltaproduct": {"n_heads": 1, "n_householder": 2, "allow_neg_eigval": True, "gate": False},
}


@pytest.mark.parametrize("mixer", sorted(MIXERS))
def test_mixer_options_default_to_the_published_values(mixer):
    opts = cfg().mixer_options(mixer).model_dump()
    assert {k: opts[k] for k in PUBLISHED_OPTIONS[mixer]} == PUBLISHED_OPTIONS[mixer]


def test_mamba_dt_rank_is_ceil_d_over_16():
    lm = build_model(cfg(preset="mamba", d_model=40, n_layers=1))
    assert lm.layers[0].mixer.dt_rank == 3


def test_presets_cover_the_study():
    assert set(PUBLISHED) == set(ARCHITECTURES)


def test_explicit_fields_override_the_preset():
    c = cfg(preset="mamba", mlp=True, d_conv=2, norm="layernorm", pos_emb="learned")
    assert (c.mlp, c.d_conv, c.norm, c.pos_emb) == ([True] * 2, [2, 2], ["layernorm"] * 2, "learned")
    assert cfg(preset="based", d_conv=[4, None]).d_conv == [4, 0]


def test_per_layer_defaults_follow_each_layers_mixer():
    c = cfg(mixer=["mamba", "attention"])
    assert (c.d_conv, c.mlp, c.norm, c.pos_emb) == ([4, 0], [False, True], ["rmsnorm", "layernorm"], "learned")


def test_options_update_a_mixers_defaults_and_are_validated():
    c = cfg(options={"attention": {"n_heads": 2}})
    assert c.mixer_options("attention").n_heads == 2
    assert cfg().mixer_options("attention").n_heads == 1
    for name, spec in MIXERS.items():
        assert cfg().mixer_options(name) == spec.options()


@st.composite
def configs(draw) -> ModelConfig:
    arch = draw(st.sampled_from(ARCHS))
    conv = draw(st.sampled_from((None, *arch_convs(arch))))
    return make_config(
        arch,
        conv,
        d_model=draw(st.sampled_from([8, 16, 64])),
        n_layers=draw(st.integers(1, 3)),
        tie_embeddings=draw(st.booleans()),
    )


@settings(max_examples=60, deadline=None)
@given(c=configs())
def test_dump_and_validate_round_trip(c):
    assert ModelConfig.model_validate(c.model_dump()) == c
    assert ModelConfig.model_validate_json(c.model_dump_json()) == c
    assert ModelConfig.model_validate(json.loads(c.model_dump_json())) == c


def test_build_model_accepts_a_dict_and_rejects_bad_fields():
    lm = build_model({"vocab_size": 11, "d_model": 8, "n_layers": 1})
    assert lm(torch.zeros(1, 3, dtype=torch.long)).shape == (1, 3, 11)
    with pytest.raises(ValidationError, match="mixer"):
        build_model({"vocab_size": 11, "mixer": "rnn"})
