"""The report's view of `interventions.timeline`: when each run's final mechanism formed.

    formation_steps(best)      run_dir -> (timeline table, formed-at step or None) for runs with one
    timeline_table(best, ...)  per run: final verdict, formed at, accuracy there, snapshots
    run_figure(table, title)   one run: accuracy and @key / @value / @query at the final read layer
                               against step (95% bands; blank where not yet learned), the verdict as a
                               coloured band along the top
    overlay_figure(best, ...)  the study: @value (and accuracy) against step, one line per run, by arch
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt  # the backend is the user's (headless: matplotlib falls back to Agg)
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from mecheval.interventions.timeline import TIMELINE, formed_at
from mecheval.interventions.verdict import LABELS, NOT_LEARNED, ROLES, beats_chance
from mecheval.report.figures import OKABE_ITO
from mecheval.store import runs

VERDICT_COLOURS = dict(zip(LABELS, ("#0072B2", "#D55E00", "#999999", "#DDDDDD", "#F0E442", "#CC79A7")))


def formation_steps(best: pd.DataFrame) -> dict[str, tuple[pd.DataFrame, int | None]]:
    """run_dir -> (its timeline read with the chance test of the current rules, `chance_gated`; the step its final
    verdict formed at) for best-lr runs with a timeline; no step for a run whose verdict is `not learned`."""
    out = {}
    for _, r in best.iterrows():
        d = r.get("run_dir")
        path = Path(str(d)) / TIMELINE
        if isinstance(d, str) and path.exists():
            table = runs.table(path, ("step", "verdict", "boundary", "read_layer", "attrib", "attrib_lo", "attrib_hi",
                                      "acc", "n"))
            table = chance_gated(table, r.get("chance", float("nan")))
            out[d] = (table, None if r.get("verdict") == NOT_LEARNED else formed_at(table))
    return out


def chance_gated(table: pd.DataFrame, chance: float) -> pd.DataFrame:
    """A timeline (timeline.parquet, decided by the rules of its day) with each step whose accuracy (`acc` over `n`
    examples) is not above the task's chance accuracy read `not learned`, as the current rules read a model at
    chance (`verdict.Accuracy`); unchanged where the chance accuracy is unknown. The file is left as it is."""
    steps = table.drop_duplicates("step")
    at_chance = {s for s, acc, n in zip(steps["step"], steps["acc"], steps["n"])
                 if beats_chance(float(acc), int(n), chance) is False}
    out = table.copy()
    out.loc[out["step"].isin(at_chance) & out["verdict"].notna(), "verdict"] = NOT_LEARNED
    return out


def read_layer_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Rows at the final verdict's read point (the input of its layer) for every step; the attributions of
    steps that had not learned the task are blanked (noise around an effect near 0)."""
    steps = table.drop_duplicates("step").sort_values("step")
    layer = steps["read_layer"].dropna()
    boundary = int(layer.iloc[-1]) if len(layer) else int(table["boundary"].max())
    rows = table[table["boundary"] == boundary].copy()
    rows.loc[rows["verdict"] == "not learned", ["attrib", "attrib_lo", "attrib_hi"]] = float("nan")
    return rows


def timeline_table(best: pd.DataFrame, timelines: dict) -> pd.DataFrame:
    rows = []
    for _, r in best.iterrows():
        if r.get("run_dir") not in timelines:
            continue
        table, step = timelines[r["run_dir"]]
        per_step = table.drop_duplicates("step").set_index("step").sort_index()
        final = per_step["verdict"].iloc[-1]
        rows.append({"arch": r["arch"], "seed": r["seed"], "final mechanism": final if isinstance(final, str) else "not read",
                     "formed at step": "–" if step is None else step,
                     "accuracy then": "–" if step is None else f"{per_step.loc[step, 'acc']:.2f}",
                     "final accuracy": f"{per_step['acc'].iloc[-1]:.2f}",
                     "snapshots": len(per_step), "n": int(per_step["n"].iloc[-1])})
    return pd.DataFrame(rows)


def run_figure(table: pd.DataFrame, title: str) -> Figure:
    per_step = table.drop_duplicates("step").sort_values("step")
    rows = read_layer_rows(table)
    fig, ax = plt.subplots(figsize=(5.6, 3.2), layout="constrained")
    for role, colour in zip(ROLES, OKABE_ITO):
        r = rows[rows["role"] == role].sort_values("step")
        ax.plot(r["step"], r["attrib"], marker="o", ms=3, color=colour, label=f"@{role}")
        ax.fill_between(r["step"], r["attrib_lo"], r["attrib_hi"], color=colour, alpha=0.15)
    ax.plot(per_step["step"], per_step["acc"], color="k", ls="--", label="accuracy")
    ax.fill_between(per_step["step"], per_step["acc_lo"], per_step["acc_hi"], color="k", alpha=0.08)
    steps = per_step["step"].tolist()
    edges = [steps[0]] + [(a + b) / 2 for a, b in zip(steps, steps[1:])] + [steps[-1]]
    for (lo, hi), verdict in zip(zip(edges, edges[1:]), per_step["verdict"]):
        if isinstance(verdict, str):
            ax.axvspan(lo, hi, ymin=0.95, ymax=1.0, color=VERDICT_COLOURS[verdict], lw=0)
    step = formed_at(table)
    if step is not None:
        ax.axvline(step, color="0.4", lw=0.8, ls=":")
    ax.set_ylim(-0.1, 1.15)
    ax.set_xlabel("training step")
    ax.set_ylabel("attrib / accuracy")
    ax.set_title(title, fontsize=8)
    bands = [Patch(color=VERDICT_COLOURS[v], label=v) for v in LABELS if v in set(per_step["verdict"].dropna())]
    ax.legend(handles=ax.get_legend_handles_labels()[0] + bands, fontsize=6, frameon=False,
              loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def overlay_figure(best: pd.DataFrame, timelines: dict, palette: dict[str, str]) -> Figure:
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.0), layout="constrained", sharex=True)
    seen = set()
    for _, r in best.iterrows():
        if r.get("run_dir") not in timelines:
            continue
        table, _ = timelines[r["run_dir"]]
        per_step = table.drop_duplicates("step").sort_values("step")
        value = read_layer_rows(table)
        value = value[value["role"] == "value"].sort_values("step")
        label = None if r["arch"] in seen else r["arch"]
        seen.add(r["arch"])
        axes[0].plot(per_step["step"], per_step["acc"], color=palette.get(r["arch"]), lw=1, label=label)
        axes[1].plot(value["step"], value["attrib"], color=palette.get(r["arch"]), lw=1)
    axes[0].set_ylabel("accuracy (outside the conv reach)")
    axes[1].set_ylabel("@value at the read point")
    for ax in axes:
        ax.set_xlabel("training step")
    axes[0].legend(fontsize=6, frameon=False)
    return fig
