"""BaseConv mixer (not implemented yet)."""

from __future__ import annotations

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec


class BaseConvOptions(MixerOptions):
    pass


class BaseConv(Mixer):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("baseconv is not implemented yet")


SPEC = MixerSpec(cls=BaseConv, options=BaseConvOptions, default_conv=3, default_mlp=True, default_norm="layernorm")
