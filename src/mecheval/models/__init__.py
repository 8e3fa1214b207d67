"""The architecture zoo: `build_model(ModelConfig(...)) -> LM` with named sites (`lm.sites()`)."""

from mecheval.models.config import ModelConfig
from mecheval.models.lm import LM, build_model
from mecheval.models.mixers import MIXERS
from mecheval.models.presets import ARCHITECTURES
from mecheval.models.sites import Site, attach, record

__all__ = ["ARCHITECTURES", "LM", "MIXERS", "ModelConfig", "Site", "attach", "build_model", "record"]
