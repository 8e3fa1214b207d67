"""Interchange interventions: a batched patching engine, the published attribution, mechanism verdicts.

interchange(lm, task, batch, corrupt, sites, positions) -> DataFrame (one row per subset, layer, site, position)
interchange_at(lm, task, batch, corrupt, sites, where)  -> the same at arbitrary positions per example
patch_all_positions(...)                                 -> the same at every token position (integer column)
resolve_positions(batch, ["key+3", "query", 5])          -> {spec: positions [B]} (roles, role offsets, integers)
mechanism(df) -> Verdict                                 induction / direct retrieval / mixed / not learned /
                                                         inconclusive (key corruption only)
The defaults are `mecheval intervene`'s: N_EXAMPLES examples, seed 0, the artefact control (`subsets`),
the joint key&query patch, the read point of `verdict.read_point`.
"""

from mecheval.interventions.engine import Cell, patch_cells, resolve_sites
from mecheval.interventions.metrics import attribution, bootstrap_attribution
from mecheval.interventions.patching import N_EXAMPLES, interchange, interchange_at, patch_all_positions
from mecheval.interventions.positions import resolve as resolve_positions
from mecheval.interventions.verdict import LABELS, Verdict, mechanism

__all__ = [
    "LABELS", "N_EXAMPLES", "Cell", "Verdict", "attribution", "bootstrap_attribution", "interchange",
    "interchange_at", "mechanism", "patch_all_positions", "patch_cells", "resolve_positions", "resolve_sites",
]
