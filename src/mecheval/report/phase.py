"""The mechanism phase diagram (issue 54): per architecture, a grid width × learning rate whose cells show the
share of each verdict over seeds, the best rate of each width (the published selection, `best_lr`) outlined.

`phase_table(runs)` is the table behind it, from a runs table as `results.study_table` gives it (finished runs
only); `phase_figure(table)` draws it. A table pooled from several studies should carry a `best_lr` chosen over
all of them (a study's own marks its best rate among the rates it tried).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from mecheval.interventions.verdict import LABELS  # noqa: E402
from mecheval.report.timelines import VERDICT_COLOURS  # noqa: E402

NOT_READ = "not read"  # a finished run without a verdict (never intervened on)
VERDICTS = (*LABELS, NOT_READ)
COLOURS = VERDICT_COLOURS | {NOT_READ: "white"}
CELL = ["arch", "width", "lr"]
PANELS_PER_ROW = 4


def phase_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (arch, width, lr) with a finished run: `seeds` (finished runs), the share of each verdict of
    VERDICTS over them (columns named by the verdict, shares in [0, 1] summing to 1), `majority` (the most common
    verdict, ties to the first in VERDICTS) and its share, `acc` (mean test accuracy), `best` (the rate `best_lr`
    keeps for the width). Sorted by arch, width, lr."""
    done = runs[runs["status"] == "done"]
    verdict = done["verdict"].where(done["verdict"].notna(), NOT_READ) if "verdict" in done else NOT_READ
    df = pd.DataFrame({"arch": done["arch"], "width": done["model.d_model"].astype(int), "lr": done["optim.lr"],
                       "verdict": verdict, "acc": done["acc"], "best": done["best_lr"].astype(bool)})
    groups = df.groupby(CELL, sort=True)
    shares = pd.crosstab([df[c] for c in CELL], df["verdict"], normalize="index").reindex(columns=list(VERDICTS), fill_value=0.0)
    table = pd.concat([groups.size().rename("seeds"), shares, groups["acc"].mean(), groups["best"].any()], axis=1)
    table["majority"] = shares.idxmax(axis=1)
    table["majority_share"] = shares.max(axis=1)
    table.columns.name = None
    return table.reset_index()[[*CELL, "seeds", *VERDICTS, "majority", "majority_share", "acc", "best"]]


def phase_figure(table: pd.DataFrame) -> plt.Figure:
    """`phase_table` drawn: a panel per architecture, rows the widths, columns the rates (every rate and width of
    the table, in every panel); each cell with runs a bar stacked left to right by the verdicts' shares, the
    majority's share and the seeds written in, the best rate outlined; a cell without runs left blank."""
    archs = list(dict.fromkeys(table["arch"]))
    widths, lrs = sorted(set(table["width"])), sorted(set(table["lr"]))
    cols = min(PANELS_PER_ROW, len(archs))
    rows = -(-len(archs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(0.9 + 0.75 * len(lrs) * cols, 0.6 + (1.0 + 0.45 * len(widths)) * rows),
                             squeeze=False)
    for ax in axes.flat[len(archs):]:
        ax.set_visible(False)
    for ax, arch in zip(axes.flat, archs):
        for _, cell in table[table["arch"] == arch].iterrows():
            x, y = lrs.index(cell["lr"]), widths.index(cell["width"])
            left = x - 0.45
            for verdict in VERDICTS:
                if cell[verdict] > 0:
                    ax.add_patch(Rectangle((left, y - 0.4), 0.9 * cell[verdict], 0.8, fc=COLOURS[verdict], ec="none"))
                    left += 0.9 * cell[verdict]
            ax.add_patch(Rectangle((x - 0.45, y - 0.4), 0.9, 0.8, fill=False, ec="black", lw=1.8 if cell["best"] else 0.4))
            ax.text(x, y, f"{cell['majority_share']:.0%}\n×{cell['seeds']}", ha="center", va="center", fontsize=6.5)
        ax.set(xlim=(-0.5, len(lrs) - 0.5), ylim=(-0.5, len(widths) - 0.5), xticks=range(len(lrs)),
               yticks=range(len(widths)), title=arch, xlabel="learning rate")
        ax.set_xticklabels([f"{lr:g}" for lr in lrs], fontsize=7, rotation=45)
        ax.set_yticklabels([f"d={w}" for w in widths], fontsize=8)
        ax.tick_params(length=0)
    shown = [v for v in VERDICTS if table[v].gt(0).any()]
    handles = [Patch(fc=COLOURS[v], ec="black", lw=0.4, label=v) for v in shown]
    handles.append(Patch(fill=False, ec="black", lw=1.8, label="best rate"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7, frameon=False)
    fig.text(0.5, 0.995, "Share of each verdict over seeds (text: the majority's share, ×seeds)", ha="center",
             va="top", fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    return fig
