"""Accuracy against width, the study's main AR result: per architecture, our best-learning-rate accuracy at
each width with its 95% interval beside the published curve, and the two compared point by point
(`decide.compare_accuracy`: agree / differ / inconclusive, decided by the difference's interval).

`width_table` is the data (one row per architecture and width, ours and published); `width_figure` draws
it, one panel per group of architectures: the zoo at its published convs, one per architecture whose
conv sizes the study varies (Mamba's d_conv, Based's layer-0 conv), and one for other depths and position
embeddings, each where the study ran them; `width_panel` draws one group on a given Axes. `readable_widths` is the table for people.
"""

from __future__ import annotations

import matplotlib.pyplot as plt  # the backend is the user's (headless: matplotlib falls back to Agg)
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from mecheval.report import published
from mecheval.report.compare import cell_runs, published_accuracy, published_words, final_test_accuracy
from mecheval.report.decide import HIGH_ACC, POOR_ACC, compare_accuracy
from mecheval.report.overview import GRAMMAR, with_interval
from mecheval.report.published import WIDTHS

ZOO = "architectures at their published convs"
VARIANTS = "other depths and position embeddings"
DODGE = 2 ** 0.04  # on the log2 width axis: 0.04 of a doubling between architectures' markers
COLUMNS = ["panel", "arch", "width", "seeds", "acc", "acc_lo", "acc_hi", "published", "comparison"]


def spans_widths(summary: pd.DataFrame) -> bool:
    """Do the study's best-learning-rate runs (`analyse.summarise`'s rows) span more than one width?"""
    return summary["model.d_model"].nunique() > 1


def panel(label: str, name: str, conv) -> str:
    """The panel an architecture (its `arch_label`, name and conv) is drawn in: `NAME: conv sizes` where its
    conv differs from the published default, VARIANTS where its depth or position embedding does, else the
    zoo's."""
    if conv is not None and conv == conv:
        return f"{name}: conv sizes"
    return ZOO if label == name else VARIANTS


def width_table(summary: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """One row per (architecture, width), over the published widths and ours: panel, arch (with the grammar
    where the study ran several), width, seeds, our final test accuracy with its 95% interval
    (`compare.final_test_accuracy`: on every test prompt, as the published accuracies were read; NaN at a width we did not
    run), the published accuracy (NaN where the study states none) and the comparison (blank unless both are there).

    summary: `analyse.summarise`'s rows (one per architecture, width[, grammar]); df: the study table, for
    each label's architecture as data (`arch_name`, `arch_conv`), task (`task.name`) and grammar, and each row's
    runs (`compare.cell_runs`).
    """
    parts = df.drop_duplicates("arch").set_index("arch")
    several = GRAMMAR in summary and summary[GRAMMAR].nunique() > 1
    keys = ["arch", GRAMMAR] if GRAMMAR in summary else ["arch"]
    rows = []
    for key, group in summary.groupby(keys, sort=False, dropna=False):
        arch = key[0]
        grammar = key[1] if len(keys) == 2 else parts[GRAMMAR].get(arch) if GRAMMAR in parts else None
        grammar = grammar if isinstance(grammar, str) else None
        name, conv, task = parts.at[arch, "arch_name"], parts.at[arch, "arch_conv"], parts.at[arch, "task.name"]
        conv = None if conv is None or conv != conv else conv
        ours = {int(r["model.d_model"]): (r, final_test_accuracy(cell_runs(df, r))) for _, r in group.iterrows()}
        for width in sorted(set(WIDTHS) | set(ours)):
            row, (acc, lo, hi) = ours.get(width, (None, (float("nan"),) * 3))
            theirs = published_accuracy(task, grammar, name, conv, width, arch)
            rows.append({"panel": panel(arch, name, conv), "arch": arch + (f" · {grammar}" if several else ""),
                         "width": width, "seeds": 0 if row is None else int(row["seeds"]), "acc": acc,
                         "acc_lo": lo, "acc_hi": hi, "published": float("nan") if theirs is None else float(theirs),
                         "comparison": "" if row is None else compare_accuracy(acc, lo, hi, theirs,
                                                                                     arch in published.UPPER_BOUNDS)})
    return pd.DataFrame(rows, columns=COLUMNS)


def readable_widths(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of `width_table` we ran, for people: ours with its interval, the published value with its
    320-example interval, and the comparison."""
    ran = table[table["seeds"] > 0]
    return pd.DataFrame({"architecture": ran["arch"], "width": ran["width"], "seeds": ran["seeds"],
                         "ours [95% CI]": [with_interval(*v) for v in zip(ran["acc"], ran["acc_lo"], ran["acc_hi"])],
                         "published [95% CI, n = 320]": ran["published"].map(published_words).tolist(),
                         "comparison": ran["comparison"].replace("", "–")}).reset_index(drop=True)


def width_panel(rows: pd.DataFrame, palette: dict[str, str], ax: Axes | None = None, title: str = "") -> Axes:
    """One group of architectures on `ax` (a new figure's where None): ours as a line with markers and 95%
    error bars at the widths we ran (each architecture's moved sideways by a factor DODGE from the next), the published accuracy as a dashed line in the same colour (labelled
    `_published ARCH`, so the legend leaves it out), on a log2 width axis over 16..256; returns the Axes.

    rows: `width_table`'s rows of the group; palette: arch -> colour.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(4.6, 3.4))
    groups = list(rows.groupby("arch", sort=False))
    for i, (arch, r) in enumerate(groups):
        colour = palette.get(arch.split(" · ")[0], palette.get(arch, "grey"))
        ours = r.dropna(subset=["acc"])
        err = [(ours["acc"] - ours["acc_lo"]).clip(lower=0).fillna(0), (ours["acc_hi"] - ours["acc"]).clip(lower=0).fillna(0)]
        dodge = DODGE ** (i - (len(groups) - 1) / 2)  # side by side at a width, so that error bars do not hide
        ax.errorbar(ours["width"] * dodge, ours["acc"], yerr=err, fmt="-o", color=colour, ms=5, capsize=3, lw=1.6, label=arch)
        theirs = r.dropna(subset=["published"])
        ax.plot(theirs["width"], theirs["published"], ls="--", marker="x", ms=4, color=colour, lw=1.1, alpha=0.8,
                label=f"_published {arch}")
    for threshold in (POOR_ACC, HIGH_ACC):  # the findings' thresholds: fails, high accuracy (`report.decide`)
        ax.axhline(threshold, color="0.85", lw=0.8, ls=":", zorder=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(WIDTHS, [str(w) for w in WIDTHS])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(WIDTHS[0] / 1.3, WIDTHS[-1] * 1.3)
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel("width d")
    ax.set_title(title, fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    style = [Line2D([], [], color="grey", marker="o", lw=1.6), Line2D([], [], color="grey", ls="--", marker="x", lw=1.1)]
    ax.legend(handles + style, labels + ["ours (95% interval)", "published"], fontsize=7, frameon=False,
              loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    return ax


def width_figure(table: pd.DataFrame, palette: dict[str, str]) -> Figure:
    """`width_table` drawn with `width_panel`, one panel per group (the zoo first), sharing the y axis."""
    panels = sorted(table["panel"].unique(), key=lambda p: (p != ZOO, p))
    fig, axes = plt.subplots(1, len(panels), figsize=(max(6.0, 4.6 * len(panels)), 4.2), sharey=True, squeeze=False,
                             layout="constrained")
    for ax, name in zip(axes[0], panels):
        width_panel(table[table["panel"] == name], palette, ax=ax, title=name)
    axes[0, 0].set_ylabel("accuracy (best learning rate)")
    fig.suptitle("Accuracy against width: ours (solid, 95% intervals) and published (dashed)", fontsize=10)
    return fig
