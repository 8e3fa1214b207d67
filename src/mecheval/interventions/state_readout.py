"""What the recurrent state carries: the answer restored by patching one layer's state after each position.

For the queried key corrupted, the clean state (`layers.{i}.state`, the state *after* a position) is
patched into the corrupted run after the key, after the value, … up to the position just before the
answer is read (the state the last step starts from). A curve per layer of the attribution says where
the association enters the state and whether it is still there when the answer is read. Both
directions: sufficiency (clean state into the corrupted run) and necessity (corrupted into clean).

Two alignments, one row each per (layer, direction, offset):
  align "key"     offset o >= 0: the state after key + o (o = 0 the key, AR: o = 1 its value), over the
                  examples where key + o lies before the answer position
  align "answer"  offset -d, d >= 1: the state after answer − d (−1: the state the answer's step starts
                  from), over the examples where answer − d is at or after the key
Columns: `layer, align, offset, direction, attrib, attrib_lo, attrib_hi, n` and the means of
`interchange`. Attention has no state: a model without state sites gives an empty table.

Cost: each point patches every example's state once, O(T · state) per example, so offsets beyond
DENSE_OFFSETS are read at a geometric grid (×1.5) plus the farthest one (`readout_offsets`): every offset
at the cpu scale (span ≤ 8), 13 of 36 per alignment at the published 16 pairs.
"""

from __future__ import annotations

import pandas as pd

from mecheval.interventions.metrics import DIRECTIONS
from mecheval.interventions.patching import interchange_at
from mecheval.models.lm import LM
from mecheval.models.states import StateSite
from mecheval.tasks import Batch, Task

COLUMNS = ["layer", "align", "offset", "direction", "attrib", "attrib_lo", "attrib_hi", "n"]
DENSE_OFFSETS = 9  # offsets 0 … 8 from the key (1 … 9 before the answer) are all read
MIN_EXAMPLES = 32  # the fewest examples behind an offset that `state_summary` reads (the far offsets of ATR have few)


def readout_offsets(first: int, last: int) -> list[int]:
    """first, first + 1, … up to first + DENSE_OFFSETS - 1, then a ×1.5 grid, and always `last` (last >= first)."""
    out, o = list(range(first, min(last, first + DENSE_OFFSETS - 1) + 1)), first + DENSE_OFFSETS - 1
    while (o := max(o + 1, round(o * 1.5))) < last:
        out.append(o)
    return out if out[-1] == last else [*out, last]


def state_sites(lm: LM) -> list[str]:
    """The names of the model's state sites, in layer order."""
    return [name for name, site in lm.sites().items() if isinstance(site, StateSite)]


def state_curve(
    lm: LM, task: Task, batch: Batch, *, corrupt: str = "key", seed: int = 0, n_boot: int = 1000
) -> pd.DataFrame:
    """The state table (module docstring) for `batch` (one answer per example)."""
    sites = state_sites(lm)
    if not sites or len(batch) == 0:
        return pd.DataFrame(columns=COLUMNS)
    if batch.answer_pos.dim() != 1:
        raise ValueError("the state readout needs one answer position per example")
    key, answer = batch.roles["key"], batch.answer_pos
    span = int((answer - 1 - key).max())
    points = [("key", o, key + o) for o in readout_offsets(0, span)]
    points += [("answer", -d, answer - d) for d in readout_offsets(1, span + 1)]
    parts = []
    for align, offset, pos in points:
        keep = ((pos >= key) & (pos < answer)).nonzero()[:, 0]
        if len(keep) == 0:
            continue
        sub = batch.select(keep)
        for direction in DIRECTIONS:
            df = interchange_at(lm, task, sub, corrupt, sites, {"s": pos[keep]}, seed=seed,
                                direction=direction, n_boot=n_boot)
            parts.append(df.assign(align=align, offset=offset))
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.concat(parts, ignore_index=True).drop(columns=["position", "subset", "site"])
    return out[COLUMNS + [c for c in out.columns if c not in COLUMNS]]


def state_summary(curve: pd.DataFrame, min_n: int = MIN_EXAMPLES) -> pd.DataFrame:
    """Per layer whose state restores anything, from the sufficiency rows: `enters` (the first offset from
    the key whose state restores at least half of the layer's most), `held` (the last offset of the run from
    `enters` on that keeps at least that half; held == enters: only the state right after that position
    restores it, what it carried of the key is gone from the state a token later), `peak` (that most, with
    `peak_lo`, `peak_hi`), and `last` (the state just before the answer is read, offset −1 from it, with
    `last_lo`, `last_hi`, `last_n`). Offsets from the key
    that fewer than `min_n` examples reach (the far ones, on ATR) are left out of `enters`, `held` and `peak`:
    one example's ratio is no reading."""
    suff = curve[curve["direction"] == "sufficiency"]
    rows = []
    for layer, part in suff.groupby("layer"):
        key = part[(part["align"] == "key") & (part["n"] >= min_n)].sort_values("offset")
        last = part[(part["align"] == "answer") & (part["offset"] == -1)]
        if key.empty or last.empty:
            continue
        if not (key["attrib"] > 0).any():  # nothing restored anywhere (e.g. a model that did not learn)
            continue
        best, end = key.loc[key["attrib"].idxmax()], last.iloc[0]
        half = (key["attrib"] >= best["attrib"] / 2).to_numpy()
        first = int(half.argmax())
        under = (~half[first:]).nonzero()[0]  # the offsets after `enters` under the half, counted from it
        held = first + (int(under[0]) if len(under) else len(half) - first) - 1
        rows.append({
            "layer": int(layer), "enters": int(key["offset"].iloc[first]), "held": int(key["offset"].iloc[held]),
            "peak": best["attrib"], "peak_lo": best["attrib_lo"], "peak_hi": best["attrib_hi"],
            "last": end["attrib"], "last_lo": end["attrib_lo"], "last_hi": end["attrib_hi"], "last_n": int(end["n"]),
        })
    return pd.DataFrame(rows)
