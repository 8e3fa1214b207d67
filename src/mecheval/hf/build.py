"""A `transformers` causal LM from an `HFModelConfig`, with random weights, offline, wrapped (`wrap`)."""

from __future__ import annotations

from mecheval.models.config import HFModelConfig
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


def build(cfg: HFModelConfig):
    """The wrapped model (`mecheval.hf.wrap`), random weights from the config."""
    from mecheval.hf.wrap import wrap

    cls = hf_class(cfg.hf)
    return wrap(cls(cls.config_class(**cfg.transformers_config())))
