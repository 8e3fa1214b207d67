"""Gated DeltaNet (Yang, Kautz & Hatamizadeh, 2025), loaded by import path
(`model.mixer: examples.mixers.gated_deltanet:GatedDeltaNet`).

Written first here as a plug-in on mecheval's public API, it is now in the zoo (`model.mixer: gated-deltanet`,
`mecheval.models.mixers.gated_deltanet`, with its equations, a chunkwise and a step form and a state site).
This path stays so that configs and results naming it load the same mixer (same parameters, same init).
"""

from mecheval.models.mixers.gated_deltanet import GatedDeltaNet, GatedDeltaNetOptions

__all__ = ["GatedDeltaNet", "GatedDeltaNetOptions"]
