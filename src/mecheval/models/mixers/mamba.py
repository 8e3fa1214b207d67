"""Mamba mixer (not implemented yet)."""

from __future__ import annotations

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec


class MambaOptions(MixerOptions):
    pass


class Mamba(Mixer):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("mamba is not implemented yet")


SPEC = MixerSpec(cls=Mamba, options=MambaOptions, default_conv=4, default_mlp=False, default_norm="rmsnorm")
