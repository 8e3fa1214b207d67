"""How a model retrieves, read off an interchange table (the study's main readout).

Readout: corrupt the queried key; patch the residual stream entering the last layer (`resid_pre`
of the largest layer in the table) at the key, value and query positions (sufficiency direction).
    not learned       effect = p_clean - p_corrupt <= min_effect (the study drops such runs:
                      0.01 on AR, 0.1 on ATR)
    induction         attrib@value >= high and attrib@query <= low: the association is stored at the
                      value position and read out by the last layer
    direct retrieval  attrib@value <= low and attrib@query + attrib@key >= high: the query position
                      (or the key, read directly) already carries the answer
    mixed             anything else
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

LABELS = ("induction", "direct retrieval", "mixed", "not learned")
HIGH, LOW = 0.8, 0.2  # default attribution thresholds: "high" at or above HIGH, "low" below LOW


@dataclass(frozen=True)
class Verdict:
    label: str  # one of LABELS
    effect: float  # p_clean - p_corrupt
    layer: int  # the layer whose input was read
    attrib_key: float
    attrib_value: float
    attrib_query: float

    def as_row(self) -> dict:
        return {
            "verdict": self.label, "effect": self.effect, "layer": self.layer,
            "attrib@key": self.attrib_key, "attrib@value": self.attrib_value, "attrib@query": self.attrib_query,
        }


def mechanism(
    df: pd.DataFrame,
    *,
    high: float = HIGH,
    low: float = LOW,
    min_effect: float = 0.01,
    corrupt: str = "key",
    site: str = "resid_pre",
    layer: int | None = None,
) -> Verdict:
    """The verdict from an `interchange` table (see the module docstring for the rules).

    high/low: attribution thresholds; min_effect: the smallest p_clean - p_corrupt kept; corrupt,
    site, layer: the rows read (layer None = the largest layer with that site in the table).
    """
    rows = df[(df["site"] == site) & (df["corrupt"] == corrupt)]
    if "direction" in rows:
        rows = rows[rows["direction"] == "sufficiency"]
    if rows.empty:
        raise ValueError(f"no sufficiency rows with site={site!r} and corrupt={corrupt!r} in the table")
    layer = int(rows["layer"].max()) if layer is None else layer
    rows = rows[rows["layer"] == layer].set_index("position")
    at = {r: float(rows.at[r, "attrib"]) if r in rows.index else math.nan for r in ("key", "value", "query")}
    effect = float(rows["p_clean"].iloc[0] - rows["p_corrupt"].iloc[0])
    if not effect > min_effect:
        label = "not learned"
    elif at["value"] >= high and at["query"] <= low:
        label = "induction"
    elif at["value"] <= low and at["query"] + at["key"] >= high:
        label = "direct retrieval"
    else:
        label = "mixed"
    return Verdict(label, effect, layer, at["key"], at["value"], at["query"])
