"""Where the association is formed inside a short convolution's window.

A mixer whose gates (Mamba's Δ_t, B_t, C_t; DeltaNet's k_t, v_t, β_t; …) are computed from the short
conv's output at t can bind a key to its value only at positions whose conv window holds both: key + 0
… key + k − 1. The readout on the residual stream cannot see this (the binding lives inside the mixer),
so two analyses look there directly:

`conv_window`: corrupt the queried key; patch the conv's input (`conv_in`) or output (`conv_out`) of one
layer at key + o, for each offset o singly and for all offsets jointly, in both directions
(sufficiency: clean into the corrupted run; necessity: corrupted into the clean run). Columns:
`layer, site, offset` (−1 for joint), `joint, direction, attrib, attrib_lo, attrib_hi, n` and the means.

`conv_ablation`: accuracy with the conv taps of lag ≥ 1 zeroed (each layer alone, all layers, and one
lag at a time), so that each position's conv sees only itself. Columns: `layers, lags, acc, acc_lo,
acc_hi, n` (the unablated model is the row `layers = lags = "none"`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pandas as pd
import torch

from mecheval.interventions.artefact import key_distance, short_convs
from mecheval.interventions.accuracy import accuracy
from mecheval.interventions.metrics import accuracy_interval
from mecheval.interventions.patching import interchange_at
from mecheval.models.lm import LM
from mecheval.models.shortconv import ShortConv
from mecheval.tasks import Batch, Task

MAX_OFFSETS = 8  # a kernel longer than this (H3's shift SSM of 1024) is read at key + 0 … 7


def conv_window(
    lm: LM, task: Task, batch: Batch, *, corrupt: str = "key", seed: int = 0, n_boot: int = 1000
) -> pd.DataFrame:
    """The conv-window table (module docstring) over the examples whose key + k − 1 lies at or before
    the answer position (so every offset is a position the answer can depend on)."""
    parts = []
    for layer, conv in short_convs(lm).items():
        w = min(conv.kernel_size, MAX_OFFSETS)
        sub = batch.select((key_distance(batch) >= w - 1).nonzero()[:, 0])
        if len(sub) == 0:
            continue
        key = sub.roles["key"]
        where = {str(o): key + o for o in range(w)} | {"-1": torch.stack([key + o for o in range(w)], dim=1)}
        for direction in ("sufficiency", "necessity"):
            df = interchange_at(
                lm, task, sub, corrupt, [f"layers.{layer}.conv_in", f"layers.{layer}.conv_out"], where,
                seed=seed, direction=direction, n_boot=n_boot,
            )
            parts.append(df)
    if not parts:
        return pd.DataFrame(columns=["layer", "site", "offset", "joint", "direction", "attrib", "attrib_lo", "attrib_hi", "n"])
    out = pd.concat(parts, ignore_index=True).drop(columns="subset")
    out["offset"] = out.pop("position").astype(int)
    out["joint"] = out["offset"] < 0
    return out


# the columns of conv_window.parquet `best_cell` reads
CELL_COLUMNS = ("layer", "site", "offset", "direction", "joint", "attrib", "attrib_lo", "attrib_hi")


def best_cell(window: pd.DataFrame, layer: int | None = None) -> pd.Series | None:
    """The single-offset `conv_out` cell (sufficiency) restoring most, in `layer` or in any; None if none has
    an attribution (a model with no effect to attribute has NaN in every cell)."""
    cells = window[(window["site"] == "conv_out") & (window["direction"] == "sufficiency") & ~window["joint"]
                   & window["attrib"].notna()]
    if layer is not None:
        cells = cells[cells["layer"] == layer]
    return None if cells.empty else cells.loc[cells["attrib"].idxmax()]


@contextlib.contextmanager
def taps_zeroed(convs: dict[int, ShortConv], lags: list[int]) -> Iterator[None]:
    """Within the block, every conv in `convs` has its taps of the given lags (≥ 1) set to zero."""
    saved = {i: c.weight.detach().clone() for i, c in convs.items()}
    try:
        with torch.no_grad():
            for c in convs.values():
                for lag in lags:
                    if lag < c.kernel_size:
                        c.weight[..., c.kernel_size - 1 - lag] = 0.0
        yield
    finally:
        with torch.no_grad():
            for i, c in convs.items():
                c.weight.copy_(saved[i])


def conv_ablation(lm: LM, batch: Batch) -> pd.DataFrame:
    """The tap-ablation table (module docstring)."""
    convs = short_convs(lm)
    rows = []

    def row(layers: str, lags: str, which: dict[int, ShortConv], zero: list[int]) -> None:
        with taps_zeroed(which, zero):
            k, n = accuracy(lm, batch)
        lo, hi = accuracy_interval(k, n)
        rows.append({"layers": layers, "lags": lags, "acc": k / n, "acc_lo": lo, "acc_hi": hi, "n": n})

    row("none", "none", {}, [])
    if len(convs) > 1:  # all layers together (one layer alone is the row below)
        longest = max(c.kernel_size for c in convs.values())
        row("+".join(map(str, convs)), ">=1", convs, list(range(1, longest)))
    for i, c in convs.items():
        row(str(i), ">=1", {i: c}, list(range(1, c.kernel_size)))
        for lag in range(1, min(c.kernel_size, MAX_OFFSETS)):
            row(str(i), str(lag), {i: c}, [lag])
    return pd.DataFrame(rows)
