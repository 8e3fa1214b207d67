"""`transformers` causal LMs under mecheval's readouts (the optional extra `mecheval[hf]`).

    from mecheval.hf import wrap
    lm = wrap(transformers_model)          # sites, forward(tokens, positions), the engine's interface

See docs/huggingface.md. Importing this package does not import `transformers` (the caller built the model).
"""

from mecheval.hf.ssm import UnsupportedModel
from mecheval.hf.wrap import HFLM, wrap

__all__ = ["HFLM", "UnsupportedModel", "wrap"]
