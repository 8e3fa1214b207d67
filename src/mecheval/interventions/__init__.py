"""Interchange interventions: a batched patching engine, the published attribution, mechanism verdicts.

interchange(lm, task, batch, corrupt, sites, positions) -> DataFrame (one row per layer, site, position)
patch_all_positions(...)                                 -> the same at every token position
mechanism(df) -> Verdict                                 induction / direct retrieval / mixed / not learned
"""

from mecheval.interventions.engine import Cell, patch_cells, resolve_sites
from mecheval.interventions.metrics import attribution, bootstrap_attribution
from mecheval.interventions.patching import interchange, patch_all_positions
from mecheval.interventions.verdict import LABELS, Verdict, mechanism

__all__ = [
    "LABELS", "Cell", "Verdict", "attribution", "bootstrap_attribution", "interchange", "mechanism",
    "patch_all_positions", "patch_cells", "resolve_sites",
]
