"""Based mixer (not implemented yet)."""

from __future__ import annotations

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec


class BasedOptions(MixerOptions):
    pass


class Based(Mixer):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("based is not implemented yet")


SPEC = MixerSpec(cls=Based, options=BasedOptions, default_conv=0, default_mlp=True, default_norm="layernorm")
