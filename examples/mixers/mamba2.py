"""Mamba-2 (Dao & Gu, 2024), loaded by import path (`model.mixer: examples.mixers.mamba2:Mamba2`).

Written first here as a plug-in on mecheval's public API, it is now in the zoo (`model.mixer: mamba2`,
`mecheval.models.mixers.mamba2`, with its equations, a chunked and a step form and a state site). This path
stays so that configs and results naming it load the same mixer (same parameters, same init).
"""

from mecheval.models.mixers.mamba2 import Mamba2, Mamba2Options

__all__ = ["Mamba2", "Mamba2Options"]
