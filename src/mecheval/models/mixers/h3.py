"""H3 mixer (not implemented yet)."""

from __future__ import annotations

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec


class H3Options(MixerOptions):
    pass


class H3(Mixer):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("h3 is not implemented yet")


SPEC = MixerSpec(cls=H3, options=H3Options, default_conv=4, default_mlp=True, default_norm="layernorm")
