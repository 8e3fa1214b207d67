"""The model kind "hf" (`models.kinds`): a `transformers` causal LM from an `HFModelConfig`, checked, then built
with random weights, offline, and wrapped (`wrap`). Registered when this module is imported."""

from __future__ import annotations

from mecheval.hf.wrap import wrap
from mecheval.models.config import HFModelConfig
from mecheval.models.kinds import ModelKind, register_kind
from mecheval.plugins import PluginError, is_import_path, load


def hf_class(name: str) -> type:
    """The transformers model class `name` (`MambaForCausalLM`, or an import path); ValueError naming what
    is wrong (no transformers installed, no such class, not a causal LM with a config class)."""
    if is_import_path(name):
        cls = load(name, "model.hf")
    else:
        try:
            import transformers
        except ImportError:
            raise PluginError(f"model.hf {name!r} needs transformers: pip install 'mecheval[hf]'") from None
        cls = getattr(transformers, name, None)
        if cls is None:
            raise PluginError(f"model.hf {name!r}: transformers has no such class (e.g. MambaForCausalLM, GPT2LMHeadModel)")
    if not isinstance(cls, type) or getattr(cls, "config_class", None) is None or not hasattr(cls, "get_output_embeddings"):
        raise PluginError(f"model.hf {name!r}: not a transformers model class with a config_class")
    return cls


def check(cfg: HFModelConfig) -> None:
    """ValueError unless transformers has the class and its config class takes the config's fields."""
    cls = hf_class(cfg.hf)
    try:
        cls.config_class(**cfg.transformers_config())
    except (TypeError, ValueError) as e:
        raise ValueError(f"config: {cls.config_class.__name__} refuses it ({e})") from None


def build(cfg: HFModelConfig):
    """The wrapped model (`mecheval.hf.wrap`), random weights from the config."""
    cls = hf_class(cfg.hf)
    return wrap(cls(cls.config_class(**cfg.transformers_config())))


register_kind("hf", ModelKind(check=check, build=build))
