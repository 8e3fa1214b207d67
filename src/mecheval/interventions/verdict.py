"""How a model retrieves, read off an interchange table (the study's main readout), with the detail
that the published label hides.

Readout: corrupt the queried key; patch the clean residual stream at the key, value and query
positions (sufficiency direction) at the *read point*:
    n_layers >= 2   the input of the layer that brings the answer to the query: the last layer input
                    (`resid_pre` of layer 1 … L−1) where @query is still below `high`, else layer 1.
                    For 2 layers this is always the published layer 1; for 3 layers it is layer 2
                    unless the answer already sits at the query there (then layer 1: an inert last
                    layer does not hide an induction in layers 0–1)
    n_layers == 1   the short conv's output inside layer 0 (`conv_out`): the only point between the
                    embedding and the answer (the embedding itself would give @key = 1 by construction)
Rows of subset `outside` (examples whose queried pair the answer cannot reach through short convs
alone, `artefact.py`) are read where the table has them.
    not learned       effect = p_clean − p_corrupt <= min_effect (the study drops such runs:
                      0.01 on AR, 0.1 on ATR)
    induction         attrib@value >= high and attrib@query <= low: the association is stored at the
                      value position and read out by the last layer
    direct retrieval  attrib@value <= low and attrib@query + attrib@key >= high. The study counts two
                      readings under this label, which `detail` separates:
                        @query >= @key  the answer is already at the query before the read point;
                        @key > @query   the layer after the read point combines key and value itself
                                        (for a conv mixer: inside its short conv window, named from
                                        the conv-window table where one is given)
    mixed             anything else
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd

from mecheval.interventions.conv_window import best_cell

LABELS = ("induction", "direct retrieval", "mixed", "not learned")
HIGH, LOW = 0.8, 0.2  # default attribution thresholds: "high" at or above HIGH, "low" below LOW
ROLES = ("key", "value", "query")
FORMED = 0.5  # a conv-window cell restoring at least this much is where the association is formed


class NothingToRead(ValueError):
    """The model has no site between the embedding and the answer that the verdict could read."""


@dataclass(frozen=True)
class Verdict:
    label: str  # one of LABELS
    detail: str  # which reading of the label, and where, in words with the deciding numbers
    effect: float  # p_clean - p_corrupt
    layer: int  # the layer whose site was read
    site: str  # the site read (resid_pre, or conv_out for 1-layer models)
    subset: str  # the examples read: "outside" (the artefact control) or "all"
    n: int  # examples behind the numbers
    attrib_key: float
    attrib_value: float
    attrib_query: float
    interval_key: tuple[float, float] = (math.nan, math.nan)  # 95% bootstrap intervals
    interval_value: tuple[float, float] = (math.nan, math.nan)
    interval_query: tuple[float, float] = (math.nan, math.nan)

    def as_row(self) -> dict:
        row = {k: v for k, v in asdict(self).items() if not k.startswith(("attrib_", "interval_", "label"))}
        row["verdict"] = self.label
        for role in ROLES:
            row[f"attrib@{role}"] = getattr(self, f"attrib_{role}")
            row[f"attrib@{role}_lo"], row[f"attrib@{role}_hi"] = getattr(self, f"interval_{role}")
        return row


def read_point(df: pd.DataFrame, high: float = HIGH) -> tuple[str, int]:
    """(site, layer) the verdict reads (module docstring) from the sufficiency rows of one corrupted
    role and subset; ValueError where the only candidate would be the embedding."""
    n_layers = int(df["n_layers"].iloc[0]) if "n_layers" in df else int(df["layer"].max()) + 1
    if n_layers == 1:
        if (df["site"] == "conv_out").any():
            return "conv_out", 0
        raise NothingToRead("a 1-layer model without a short conv has no site between the embedding and the answer to read")
    query = df[(df["site"] == "resid_pre") & (df["position"] == "query")].set_index("layer")["attrib"]
    below = [i for i in range(1, n_layers) if i in query.index and query[i] < high]
    return "resid_pre", max(below, default=1)


def mechanism(
    df: pd.DataFrame,
    *,
    high: float = HIGH,
    low: float = LOW,
    min_effect: float = 0.01,
    corrupt: str = "key",
    site: str | None = None,
    layer: int | None = None,
    subset: str | None = None,
    conv_window: pd.DataFrame | None = None,
) -> Verdict:
    """The verdict from an `interchange` table (see the module docstring for the rules).

    high/low: attribution thresholds; min_effect: the smallest p_clean − p_corrupt kept; corrupt: the
    corrupted role read; site/layer: override the read point (`read_point`); subset: the examples
    (default `outside` where present, else `all`); conv_window: a `conv_window` table, to name where a
    combining layer binds key and value.
    """
    rows = df[df["corrupt"] == corrupt]
    if "direction" in rows:
        rows = rows[rows["direction"] == "sufficiency"]
    if rows.empty:
        raise ValueError(f"no sufficiency rows with corrupt={corrupt!r} in the table")
    if "subset" in rows:
        subset = subset or ("outside" if (rows["subset"] == "outside").any() else "all")
        rows = rows[rows["subset"] == subset]
    else:
        subset = "all"
    default_site, default_layer = read_point(rows, high)
    site = site or default_site
    layer = default_layer if layer is None else layer
    rows = rows[(rows["site"] == site) & (rows["layer"] == layer)].set_index("position")
    if rows.empty:
        raise ValueError(f"no rows for site {site!r} of layer {layer} (subset {subset!r}) in the table")
    at = {r: float(rows.at[r, "attrib"]) if r in rows.index else math.nan for r in ROLES}
    ci = {
        r: (float(rows.at[r, "attrib_lo"]), float(rows.at[r, "attrib_hi"]))
        if r in rows.index and "attrib_lo" in rows else (math.nan, math.nan)
        for r in ROLES
    }
    effect = float(rows["p_clean"].iloc[0] - rows["p_corrupt"].iloc[0])
    where = f"{'the input of layer' if site == 'resid_pre' else site + ' of layer'} {layer}"
    if not effect > min_effect:
        label, detail = "not learned", f"corrupting the key changes p(answer) by {effect:.3f} (<= {min_effect})"
    elif at["value"] >= high and at["query"] <= low:
        label = "induction"
        detail = f"association stored at the value by {where} (@value {at['value']:.2f})"
        detail += "".join(_conv_detail(conv_window, i, f", formed in layer {i}'s") for i in range(layer))
    elif at["value"] <= low and at["query"] + at["key"] >= high:
        label = "direct retrieval"
        if at["query"] >= at["key"]:
            detail = f"answer already at the query by {where} (@query {at['query']:.2f})"
        else:
            detail = f"layer {layer} combines key and value itself (@key {at['key']:.2f} at {where})"
            detail += _conv_detail(conv_window, layer, ", in its")
    else:
        label = "mixed"
        detail = ", ".join(f"@{r} {at[r]:.2f}" for r in ROLES) + f" at {where}"
    n = int(rows["n"].iloc[0]) if "n" in rows else 0
    return Verdict(label, detail, effect, layer, site, subset, n,
                   at["key"], at["value"], at["query"], ci["key"], ci["value"], ci["query"])


def formed_at(conv_window: pd.DataFrame | None, layer: int) -> pd.Series | None:
    """The single-offset `conv_out` cell of `layer` restoring most (sufficiency), if it restores >= FORMED."""
    if conv_window is None or conv_window.empty:
        return None
    best = best_cell(conv_window, layer)
    return best if best is not None and best["attrib"] >= FORMED else None


def _conv_detail(conv_window: pd.DataFrame | None, layer: int, lead: str) -> str:
    best = formed_at(conv_window, layer)
    if best is None:
        return ""
    return f"{lead} short conv window (conv_out at key+{int(best['offset'])} restores {best['attrib']:.2f})"
