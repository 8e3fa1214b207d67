"""The report's figures (matplotlib, headless): accuracy, the attribution scatter, attribution boxes."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from mecheval.interventions.verdict import HIGH, LOW  # noqa: E402

POSITIONS = ("key", "value", "query")


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def colours(archs: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("tab10")
    return {a: cmap(i % 10) for i, a in enumerate(archs)}


def accuracy_figure(best: pd.DataFrame) -> Figure:
    """Accuracy of the best-lr run per (architecture, width): bars with their 95% interval, the
    published value as a tick. The bars read `acc_outside` (the artefact control) where the runs were
    intervened on, else the final test accuracy `acc`.

    best: rows with `arch`, `model.d_model`, `acc`, `published_acc` (NaN where none), and optionally
    `acc_outside` with `acc_outside_lo` / `acc_outside_hi`.
    """
    col = "acc_outside" if "acc_outside" in best and best["acc_outside"].notna().any() else "acc"
    widths = sorted(best["model.d_model"].unique())
    archs = list(dict.fromkeys(best["arch"]))
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(archs) * len(widths)), 3.6))
    bar = 0.8 / len(widths)
    for j, w in enumerate(widths):
        rows = best[best["model.d_model"] == w].set_index("arch")
        xs = [i + (j - (len(widths) - 1) / 2) * bar for i in range(len(archs))]
        ys = [rows[col].get(a, float("nan")) for a in archs]
        err = None
        if f"{col}_lo" in rows:
            err = [[max(y - rows[f"{col}_lo"].get(a, y), 0) for a, y in zip(archs, ys)],
                   [max(rows[f"{col}_hi"].get(a, y) - y, 0) for a, y in zip(archs, ys)]]
        ax.bar(xs, ys, width=bar * 0.9, label=f"d={w}", yerr=err, capsize=3)
        ax.scatter(xs, [rows["published_acc"].get(a, float("nan")) for a in archs], marker="_", s=300,
                   color="black", zorder=3, label="published" if j == 0 else None)
    ax.set_xticks(range(len(archs)), archs, rotation=20, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy outside the conv reach" if col == "acc_outside" else "test accuracy")
    ax.legend(fontsize=8, ncols=min(6, len(widths) + 1))
    ax.set_title("Accuracy at the best learning rate (bars: ours; ticks: published)")
    return fig


ATTRIB_FRAME = (-0.25, 1.25)  # attributions of runs that learned the task lie in [0, 1] up to noise


def _learned(df: pd.DataFrame) -> pd.Series:
    return df["verdict"] != "not learned"


def scatter_figure(df: pd.DataFrame) -> Figure:
    """attrib@value vs attrib@query, one point per run with interventions, coloured by architecture.

    Runs that did not learn the task are hollow; a run outside ATTRIB_FRAME (tiny effects make the
    ratio unstable) is drawn at the frame's edge.
    """
    rows = df.dropna(subset=["attrib@value", "attrib@query"])
    archs = list(dict.fromkeys(rows["arch"]))
    col = colours(archs)
    fig, ax = plt.subplots(figsize=(5, 4.2))
    for a in archs:
        r = rows[rows["arch"] == a]
        xy = r[["attrib@query", "attrib@value"]].astype(float).clip(*ATTRIB_FRAME)
        learned = _learned(r).to_numpy()
        ax.scatter(xy["attrib@query"][learned], xy["attrib@value"][learned], color=col[a], s=40,
                   label=a if learned.any() else None, alpha=0.8, edgecolor="black", linewidth=0.4)
        if "attrib@value_lo" in r and learned.any():  # each run's 95% bootstrap intervals
            lr = r[learned].astype({c: float for c in r.columns if c.startswith("attrib@")})
            ax.errorbar(xy["attrib@query"][learned], xy["attrib@value"][learned], fmt="none", ecolor=col[a], lw=0.8,
                        xerr=[(lr["attrib@query"] - lr["attrib@query_lo"]).clip(0), (lr["attrib@query_hi"] - lr["attrib@query"]).clip(0)],
                        yerr=[(lr["attrib@value"] - lr["attrib@value_lo"]).clip(0), (lr["attrib@value_hi"] - lr["attrib@value"]).clip(0)])
        ax.scatter(xy["attrib@query"][~learned], xy["attrib@value"][~learned], facecolor="none", edgecolor=col[a],
                   s=40, linewidth=1.2, label=None if learned.any() else f"{a} (not learned)")
    ax.axhline(HIGH, color="grey", lw=0.6, ls="--")  # the verdict's thresholds
    ax.axvline(LOW, color="grey", lw=0.6, ls="--")
    ax.set_xlabel("attrib @ query (direct retrieval)")
    ax.set_ylabel("attrib @ value (induction)")
    ax.set_xlim(*ATTRIB_FRAME)
    ax.set_ylim(*ATTRIB_FRAME)
    ax.legend(fontsize=8, loc="center right")
    ax.set_title("Where the association is stored (corrupt key, residual into the last layer;\n"
                 "hollow: not learned, drawn at the edge when outside the frame)", fontsize=8)
    return fig


def boxes_figure(df: pd.DataFrame) -> Figure:
    """Box plots per architecture of attrib@key / @value / @query over its runs that learned the task."""
    rows = df.dropna(subset=["attrib@value"])
    rows = rows[_learned(rows)]
    archs = list(dict.fromkeys(rows["arch"]))
    fig, axes = plt.subplots(1, len(POSITIONS), figsize=(3.2 * len(POSITIONS), 3.4), sharey=True)
    for ax, pos in zip(axes, POSITIONS):
        data = [rows.loc[rows["arch"] == a, f"attrib@{pos}"].astype(float).tolist() for a in archs]
        ax.boxplot(data, tick_labels=archs)
        ax.tick_params(axis="x", rotation=30, labelsize=8)
        ax.set_title(f"attrib @ {pos}")
        ax.axhline(0, color="grey", lw=0.5)
    axes[0].set_ylabel("attribution")
    return fig
