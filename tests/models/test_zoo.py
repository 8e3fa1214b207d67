"""Properties every mixer of the zoo (and the hybrid presets) must have, at every `d_conv`."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mecheval.models import LM, MIXERS, ModelConfig, attach, record
from mecheval.models.longconv import LongConv
from mecheval.models.shortconv import ShortConv
from mecheval.models.states import StateValue

from .conftest import (
    ARCHS,
    FEW,
    MAX_T,
    VOCAB,
    arch_convs,
    build,
    cases,
    d_models,
    has_recurrent,
    layer_counts,
    layer_mixers,
    make_config,
    random_tokens,
    seeds,
)

RECURRENT_ARCHS = [a for a in ARCHS if has_recurrent(a)]
CONV_MIXERS = [m for m in MIXERS if MIXERS[m].has_conv]


# ---------------------------------------------------------------------------------------- causality


def assert_causal(lm: LM, data, seed: int) -> torch.Tensor:
    """Tokens after a random t changed (every one of them) leave the logits up to t unchanged."""
    T = data.draw(st.integers(2, MAX_T), label="T")
    t = data.draw(st.integers(0, T - 2), label="t")
    x = random_tokens(2, T, seed)
    y = x.clone()
    y[:, t + 1 :] = (x[:, t + 1 :] + random_tokens(2, T - t - 1, seed + 1) % (VOCAB - 1) + 1) % VOCAB
    with torch.no_grad():
        a, b = lm(x), lm(y)
    torch.testing.assert_close(b[:, : t + 1], a[:, : t + 1], atol=1e-5, rtol=0)
    # The check can fail: the first changed position does see its new token.
    assert (a[:, t + 1] - b[:, t + 1]).abs().max() > 1e-4
    return x


@pytest.mark.parametrize("arch,d_conv", cases())
@FEW
@given(d_model=d_models, n_layers=layer_counts, seed=seeds, data=st.data())
def test_future_tokens_do_not_change_past_logits(arch, d_conv, d_model, n_layers, seed, data):
    assert_causal(build(make_config(arch, d_conv, d_model=d_model, n_layers=n_layers), seed), data, seed)


@st.composite
def hybrids(draw) -> ModelConfig:
    """Any 2-layer mix of mixers, each layer with any conv it accepts."""
    mixers = draw(st.lists(st.sampled_from(list(MIXERS)), min_size=2, max_size=2))
    convs = [draw(st.sampled_from(arch_convs(m))) for m in mixers]
    return ModelConfig(vocab_size=VOCAB, d_model=draw(d_models), n_layers=2, mixer=mixers, d_conv=convs, max_len=MAX_T)


@settings(FEW, max_examples=20)
@given(cfg=hybrids(), seed=seeds, data=st.data())
def test_random_hybrids_are_causal_and_recurrent(cfg, seed, data):
    lm = build(cfg, seed)
    x = assert_causal(lm, data, seed)
    if all(MIXERS[m].has_recurrent for m in cfg.mixer):
        with torch.no_grad():
            torch.testing.assert_close(lm.recurrent(x), lm(x), atol=1e-4, rtol=0)


# ------------------------------------------------------------------------------ recurrent == parallel


@pytest.mark.parametrize("arch,d_conv", cases(RECURRENT_ARCHS))
@FEW
@given(d_model=d_models, n_layers=layer_counts, T=st.integers(1, MAX_T), seed=seeds)
def test_recurrent_form_equals_parallel_form(arch, d_conv, d_model, n_layers, T, seed):
    lm = build(make_config(arch, d_conv, d_model=d_model, n_layers=n_layers), seed)
    tokens = random_tokens(2, T, seed)
    with torch.no_grad():
        parallel = lm(tokens)
    torch.testing.assert_close(lm.recurrent(tokens), parallel, atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch,d_conv", cases([m for m in MIXERS if MIXERS[m].has_recurrent]))
@FEW
@given(T=st.integers(1, MAX_T), seed=seeds)
def test_mixer_step_form_equals_forward_on_unit_inputs(arch, d_conv, T, seed):
    """The mixer alone, on unit-scale inputs (the LM test sees it through norms and a small head)."""
    mixer = build(make_config(arch, d_conv, n_layers=1), seed).layers[0].mixer
    x = torch.randn(2, T, 16, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        torch.testing.assert_close(mixer.recurrent(x), mixer(x), atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------------------------- convolutions


def conv_modules(lm: nn.Module) -> tuple[list[ShortConv], list[LongConv]]:
    mods = list(lm.modules())
    return [m for m in mods if isinstance(m, ShortConv)], [m for m in mods if isinstance(m, LongConv)]


@pytest.mark.parametrize("mixer", CONV_MIXERS)
@pytest.mark.parametrize("d_conv", [0, 1, 2, 3, 4, "long"])
def test_d_conv_sets_the_convolution(mixer, d_conv):
    cfg = make_config(mixer, d_conv)
    lm, lm0 = build(cfg), build(make_config(mixer, 0))
    short, long = conv_modules(lm)
    short0, long0 = conv_modules(lm0)
    conv_sites = [n for n in lm.sites() if n.endswith(".conv_out")]
    assert not short0 and not any(isinstance(m, nn.Conv1d) for m in lm0.modules())
    assert not [n for n in lm0.sites() if n.endswith(".conv_out")]
    if d_conv == 0:
        assert not short and not conv_sites and len(long) == len(long0)
    elif d_conv == "long":
        assert not short and len(long) > len(long0)
        assert conv_sites == [f"layers.{i}.conv_out" for i in range(cfg.n_layers)]
    else:
        assert short and all(c.kernel_size == d_conv and c.weight.shape[-1] == d_conv for c in short)
        assert len(long) == len(long0)
        assert conv_sites == [f"layers.{i}.conv_out" for i in range(cfg.n_layers)]
        # The conv weights are the only parameters d_conv adds.
        assert lm.num_params() - lm0.num_params() == sum(c.weight.numel() for c in short)


# -------------------------------------------------------------------------------------------- sites

STATEFUL = ("mamba", "h3", "deltanet", "based")  # mixers with a recurrent state site (`models.states`)
STATEFUL += ("mamba2", "mamba3", "gated-deltanet", "gla", "rwkv7", "deltaproduct")
SITE_CASES = cases(convs=(0, 3, "long")) + cases(convs=(4,), archs=["mamba", "deltanet", "deltaproduct"])


def expected_sites(cfg) -> list[str]:
    names = []
    for i in range(cfg.n_layers):
        conv = cfg.d_conv[i]
        local = ["resid_pre", "mixer_in"] + (["two_token"] if cfg.mixer[i] == "rwkv7" else [])  # its token shift
        local += ["conv_in"] if isinstance(conv, int) and conv > 0 else []
        local += ["conv_out"] if conv != 0 else []
        local += ["reflection"] if cfg.mixer[i] == "deltaproduct" else []  # β's part above 1 (negative eigenvalues)
        local += ["rotary", "two_token"] if cfg.mixer[i] == "mamba3" else []
        local += ["state"] if cfg.mixer[i] in STATEFUL else []
        local += ["attn_pattern", "head0"] if cfg.mixer[i] == "attention" else []  # one head by default
        local += ["core_out", "mixer_out", "resid_mid"] + (["mlp_out"] if cfg.mlp[i] else []) + ["resid_post"]
        names += [f"layers.{i}.{n}" for n in local]
    return names


@pytest.mark.parametrize("arch,d_conv", SITE_CASES)
def test_every_site_exists_once_in_forward_order_with_its_shape(arch, d_conv):
    cfg = make_config(arch, d_conv)
    lm = build(cfg)
    assert list(lm.sites()) == expected_sites(cfg)
    assert all(site.name == name for name, site in lm.sites().items())
    calls: dict[str, int] = {}

    def count(name):
        def fn(x):
            calls[name] = calls.get(name, 0) + 1

        return fn

    tokens = random_tokens(3, 11, 0)
    with torch.no_grad(), attach(lm.sites(), {n: count(n) for n in lm.sites()}), record(lm.sites()) as acts:
        lm(tokens)
    assert calls == {n: 1 for n in lm.sites()}
    assert list(acts) == list(lm.sites())  # recorded in the order they ran
    residual = ("resid_pre", "mixer_in", "mixer_out", "resid_mid", "mlp_out", "resid_post")
    for name, a in acts.items():
        if isinstance(a, StateValue):  # the state after each position, read where asked
            assert name.endswith(".state") and a.output.shape[0] == 3
            assert a.at(torch.arange(3), torch.tensor([0, 5, 10])).shape == (3, a.size)
            continue
        assert a.dim() == (4 if name.endswith("attn_pattern") else 3) and a.shape[:2] == (3, 11), (name, a.shape)
        if name.rsplit(".", 1)[1] in residual:
            assert a.shape[2] == cfg.d_model, (name, a.shape)


@pytest.mark.parametrize("arch,d_conv", SITE_CASES)
def test_sites_are_identities_that_carry_the_computation(arch, d_conv):
    cfg = make_config(arch, d_conv)
    lm = build(cfg)
    tokens = random_tokens(2, 9, 1)
    sites = lm.sites()
    with torch.no_grad():
        clean = lm(tokens)
        with attach(sites, {n: (lambda x: x) for n in sites}):
            same = lm(tokens)
        with attach(sites, {n: (lambda x: x if isinstance(x, StateValue) else x.clone()) for n in sites}):
            copied = lm(tokens)
        # bitwise, except where a hook moves attention off fused SDPA onto its explicit (observed) path
        exact = {"atol": 0, "rtol": 0} if "attention" not in cfg.mixer else {"atol": 1e-5, "rtol": 1e-5}
        torch.testing.assert_close(same, clean, **exact)
        torch.testing.assert_close(copied, clean, **exact)
        # Patching each site changes the output: the site's tensor is the one the model uses.
        rows, first = torch.arange(2), torch.zeros(2, dtype=torch.long)

        def noisy(x, noise):
            if isinstance(x, StateValue):  # the state after position 0, moved
                return x.patched(rows, first, x.at(rows, first) + torch.randn(2, x.size, generator=noise))
            return x + torch.randn(x.shape, generator=noise)

        for name in sites:
            noise = torch.Generator().manual_seed(0)
            with attach(sites, {name: lambda x: noisy(x, noise)}):
                patched = lm(tokens)
            assert (patched - clean).abs().max() > 1e-4, f"patching {name} has no effect"


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_at_positions_equal_full_logits_gathered(arch):
    lm = build(make_config(arch))
    tokens = random_tokens(4, 13, 2)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        full = lm(tokens)
        p = torch.randint(13, (4,), generator=g)
        torch.testing.assert_close(lm(tokens, positions=p), full[torch.arange(4), p], atol=1e-6, rtol=1e-6)
        pk = torch.randint(13, (4, 5), generator=g)
        torch.testing.assert_close(
            lm(tokens, positions=pk), full[torch.arange(4)[:, None], pk], atol=1e-6, rtol=1e-6
        )


@pytest.mark.parametrize("arch", ARCHS)
def test_layers_use_the_configured_mixers(arch):
    cfg = make_config(arch)
    lm = build(cfg)
    assert [type(b.mixer) for b in lm.layers] == [MIXERS[m].cls for m in layer_mixers(arch, cfg.n_layers)]
    assert [b.mlp is not None for b in lm.layers] == cfg.mlp
