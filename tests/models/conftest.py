"""Small model configs for the zoo tests: every mixer, every `d_conv`, and the hybrid presets.

An *arch* is a mixer name (every layer that mixer) or `preset:<name>` (a published architecture of
`ARCHITECTURES` with more than one kind of layer, e.g. Based = baseconv then based). For a preset the
`d_conv` ablation applies to layer 0, as in the study ("Based AR accuracy by layer-0 conv").
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from mecheval.models import ARCHITECTURES, LM, MIXERS, ModelConfig, build_model

VOCAB = 32
MAX_T = 24
MAX_LEN = 32  # >= MAX_T; keeps learned positions and long filters small
CONVS = (0, 1, 2, 3, 4, "long")
PRESETS = ("based", "baseconv")  # the hybrid / per-layer presets
PRESET_LAYERS = 2
ARCHS = (*MIXERS, *(f"preset:{p}" for p in PRESETS))

# A few examples per parametrized case (the cases already span mixers x convs); no shrinking, so a
# failing case reports quickly on 2 shared cores.
FEW = settings(
    max_examples=4,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


def layer_mixers(arch: str, n_layers: int = PRESET_LAYERS) -> list[str]:
    if arch.startswith("preset:"):
        m = ARCHITECTURES[arch.removeprefix("preset:")]["mixer"]
        return list(m) if isinstance(m, list) else [m] * PRESET_LAYERS
    return [arch] * n_layers


def arch_convs(arch: str) -> tuple:
    """The `d_conv` values the ablated layer of `arch` accepts (just 0 where it has no conv)."""
    return CONVS if MIXERS[layer_mixers(arch)[0]].has_conv else (0,)


def has_recurrent(arch: str) -> bool:
    return all(MIXERS[m].has_recurrent for m in layer_mixers(arch))


def make_config(
    arch: str, d_conv=None, *, d_model: int = 16, n_layers: int = 2, vocab_size=VOCAB, max_len=MAX_LEN, **kw
) -> ModelConfig:
    """A small config of `arch`; `d_conv` None keeps the published default. Presets keep their layers."""
    base = dict(vocab_size=vocab_size, d_model=d_model, max_len=max_len, **kw)
    if arch.startswith("preset:"):
        name = arch.removeprefix("preset:")
        convs = list(ARCHITECTURES[name].get("d_conv", [None] * PRESET_LAYERS))
        if d_conv is not None:
            convs[0] = d_conv
        return ModelConfig(preset=name, n_layers=PRESET_LAYERS, d_conv=convs, **base)
    return ModelConfig(mixer=arch, d_conv=d_conv, n_layers=n_layers, **base)


def build(cfg: ModelConfig, seed: int = 0) -> LM:
    torch.manual_seed(seed)
    return build_model(cfg).eval()


def random_tokens(batch: int, T: int, seed: int) -> torch.Tensor:
    return torch.randint(VOCAB, (batch, T), generator=torch.Generator().manual_seed(seed))


def cases(archs=ARCHS, convs=None) -> list:
    """pytest params (arch, d_conv) over `archs` x the convs each accepts (restricted to `convs`)."""
    return [
        pytest.param(a, c, id=f"{a}-conv{c}")
        for a in archs
        for c in arch_convs(a)
        if convs is None or c in convs
    ]


d_models = st.sampled_from([8, 16])
layer_counts = st.integers(1, 2)
seeds = st.integers(0, 2**16)
