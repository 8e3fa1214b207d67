"""DeltaNet mixer (not implemented yet)."""

from __future__ import annotations

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec


class DeltaNetOptions(MixerOptions):
    pass


class DeltaNet(Mixer):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("deltanet is not implemented yet")


SPEC = MixerSpec(cls=DeltaNet, options=DeltaNetOptions, default_conv=4, default_mlp=True, default_norm="layernorm")
