"""The mixer zoo: name -> MixerSpec (class, options, published block defaults)."""

from mecheval.models.mixers import attention, based, baseconv, deltanet, h3, hyena, mamba
from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec

MIXERS: dict[str, MixerSpec] = {
    "attention": attention.SPEC,
    "mamba": mamba.SPEC,
    "deltanet": deltanet.SPEC,
    "h3": h3.SPEC,
    "hyena": hyena.SPEC,
    "based": based.SPEC,
    "baseconv": baseconv.SPEC,
}

__all__ = ["MIXERS", "Mixer", "MixerOptions", "MixerSpec"]
