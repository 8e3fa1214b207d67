"""The mixer zoo, registered by import path like any plug-in: `mixer_spec(name)` -> MixerSpec.

A config's `model.mixer` is a zoo name (`mamba`) or an import path (`mypkg.retnet:RetNet`, a `Mixer`
subclass or a `MixerSpec`); both load through `mixer_spec`, which checks the contract (`base.py`).
"""

from __future__ import annotations

import functools

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec
from mecheval.plugins import PluginError, is_import_path, load

ZOO: dict[str, str] = {
    name: f"mecheval.models.mixers.{name}:SPEC"
    for name in ("attention", "mamba", "deltanet", "h3", "hyena", "based", "baseconv")
}
ZOO["mamba2"] = "mecheval.models.mixers.mamba2:SPEC"
ZOO["mamba3"] = "mecheval.models.mixers.mamba3:SPEC"
ZOO["gated-deltanet"] = "mecheval.models.mixers.gated_deltanet:SPEC"
ZOO["gla"] = "mecheval.models.mixers.gla:SPEC"  # Yang et al. 2024
ZOO["rwkv7"] = "mecheval.models.mixers.rwkv7:SPEC"  # Peng et al. 2025
ZOO["deltaproduct"] = "mecheval.models.mixers.deltaproduct:SPEC"  # Siems et al. 2025


@functools.cache
def mixer_spec(name: str) -> MixerSpec:
    """The spec of zoo mixer `name` or of the plug-in at import path `name`; PluginError names what is
    wrong (unknown name, import failure, broken contract)."""
    if name not in ZOO and not is_import_path(name):
        raise PluginError(f"unknown mixer {name!r}; known: {sorted(ZOO)}, or an import path 'package.module:Class'")
    return MixerSpec.of(load(ZOO.get(name, name), "mixer"), name)


def mixer_label(name: str) -> str:
    """How reports name a mixer: its zoo name, or a plug-in's `label` (default: its class name in lower case)."""
    return name if name in ZOO else mixer_spec(name).cls.label or mixer_spec(name).cls.__name__.lower()


MIXERS: dict[str, MixerSpec] = {name: mixer_spec(name) for name in ZOO}

__all__ = ["MIXERS", "ZOO", "Mixer", "MixerOptions", "MixerSpec", "mixer_label", "mixer_spec"]
