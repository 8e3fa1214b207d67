"""Hyena mixer (not implemented yet)."""

from __future__ import annotations

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec


class HyenaOptions(MixerOptions):
    pass


class Hyena(Mixer):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("hyena is not implemented yet")


SPEC = MixerSpec(cls=Hyena, options=HyenaOptions, default_conv=3, default_mlp=True, default_norm="layernorm")
