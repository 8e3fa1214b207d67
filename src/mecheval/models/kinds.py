"""Model kinds built outside `models`: a config's kind -> how it is checked and built.

`models` never imports an adapter. An adapter registers its kind when its module is imported
(`register_kind`); `model_kind` imports that module, named in ADAPTERS, the first time the kind is asked for:
    "hf"   a `transformers` causal LM (`HFModelConfig`), by `mecheval.hf.build` (the optional extra
           `mecheval[hf]`: importing the adapter needs no `transformers`; checking or building a config does)
The zoo's own LM is no adapter: `build_model` builds it directly.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

ADAPTERS = {"hf": "mecheval.hf.build"}  # kind -> the module that registers it


@dataclass(frozen=True)
class ModelKind:
    """How configs of one kind become models."""

    check: Callable[[Any], None]  # config -> None, or ValueError naming what the kind cannot build (its validator calls it)
    build: Callable[[Any], nn.Module]  # config -> the model, with mecheval's sites as an LM has them


_KINDS: dict[str, ModelKind] = {}


def register_kind(name: str, kind: ModelKind) -> None:
    """Makes kind `name` known (its adapter's module calls this when imported)."""
    _KINDS[name] = kind


def model_kind(name: str) -> ModelKind:
    """Kind `name`, its adapter imported on first use; ValueError for a kind no adapter provides."""
    if name not in _KINDS:
        if name not in ADAPTERS:
            raise ValueError(f"unknown model kind {name!r}; known: {sorted(ADAPTERS)}")
        importlib.import_module(ADAPTERS[name])
    return _KINDS[name]
