"""The report's figures (matplotlib, headless): accuracy, the attribution scatter, attributions per run,
and the annotated example heatmap of "how to read this". Every figure colours an architecture the same
way (`colours`, the colour-blind-safe Okabe–Ito palette) and keeps its legend off the data."""

from __future__ import annotations

import io
import shutil
import subprocess
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt  # the backend is the user's (headless: matplotlib falls back to Agg)
import pandas as pd
from matplotlib.figure import Figure

from mecheval.interventions.plots import attrib_grid
from mecheval.interventions.verdict import read_point
from mecheval.report.decide import HIGH, LOW
from mecheval.report.overview import ACCURACIES, shown_accuracy

POSITIONS = ("key", "value", "query")


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def optimise_png_file(path: Path) -> None:
    """Losslessly shrinks the PNG at `path` in place with optipng, where installed (else leaves it)."""
    if shutil.which("optipng"):
        subprocess.run(["optipng", "-quiet", "-o2", str(path)], check=False)


def optimise_png(data: bytes) -> bytes:
    """`data` (a PNG) shrunk by `optimise_png_file`; the same bytes where optipng is not installed."""
    if not shutil.which("optipng"):
        return data
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "figure.png"
        path.write_bytes(data)
        optimise_png_file(path)
        return path.read_bytes()


OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
MIN_BOX = 3  # runs per architecture below which its attributions are drawn as points, not a box


def colours(archs: list[str]) -> dict[str, str]:
    """One colour per architecture, in the order given (the report's summary order), for every figure."""
    return {a: OKABE_ITO[i % len(OKABE_ITO)] for i, a in enumerate(archs)}


def _legend_outside(ax, **kw) -> None:
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, **kw)


def accuracy_figure(best: pd.DataFrame, palette: dict[str, str] | None = None) -> Figure:
    """Accuracy of the best-lr run per (architecture, width): bars with their 95% interval
    (`overview.shown_accuracy` picks which accuracy; the y label names them), the published value as a tick.

    best: rows with `arch`, `model.d_model`, `acc`, `published_acc` (NaN where none), and optionally
    `acc_outside` / `acc_all` with their `_lo` / `_hi`.
    """
    widths = sorted(best["model.d_model"].unique())
    archs = list(dict.fromkeys(best["arch"]))
    palette = palette or colours(archs)
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(archs) * len(widths)), 3.6))
    bar = 0.8 / len(widths)
    used = set()
    for j, w in enumerate(widths):
        rows = best[best["model.d_model"] == w].drop_duplicates("arch").set_index("arch")
        xs = [i + (j - (len(widths) - 1) / 2) * bar for i in range(len(archs))]
        shown = [shown_accuracy(rows.loc[a]) if a in rows.index else (float("nan"),) * 3 + ("acc",) for a in archs]
        used |= {c for *_, c in shown}
        ys = [y for y, *_ in shown]
        err = [[0 if lo != lo else max(y - lo, 0) for y, lo, _, _ in shown],  # no interval: no bar
               [0 if hi != hi else max(hi - y, 0) for y, _, hi, _ in shown]]
        ax.bar(xs, ys, width=bar * 0.9, yerr=err, capsize=3, color=[palette.get(a, "grey") for a in archs],
               alpha=1.0 - 0.5 * j / max(len(widths) - 1, 1), label=f"d={w}" if len(widths) > 1 else None)
        ax.scatter(xs, [rows["published_acc"].get(a, float("nan")) for a in archs], marker="_", s=300,
                   color="black", zorder=3, label="published" if j == 0 else None)
    ax.set_xticks(range(len(archs)), archs, rotation=20, ha="right")
    ax.set_ylim(0, 1.05)
    names = {"acc_outside": "outside the conv reach", "acc_all": "all intervention examples", "acc": "test"}
    ax.set_ylabel("accuracy (" + ", or ".join(names[c] for c in ACCURACIES if c in used) + ")", fontsize=8)
    _legend_outside(ax)
    ax.set_title("Accuracy at the best learning rate (bars: ours with 95% interval; ticks: published)", fontsize=9)
    return fig


ATTRIB_FRAME = (-0.25, 1.25)  # attributions of runs that learned the task lie in [0, 1] up to noise


def _learned(df: pd.DataFrame) -> pd.Series:
    return df["verdict"] != "not learned"


def scatter_figure(df: pd.DataFrame, palette: dict[str, str] | None = None) -> Figure:
    """attrib@value vs attrib@query, one point per run with interventions, coloured by architecture.

    Runs that did not learn the task are hollow; a run outside ATTRIB_FRAME (tiny effects make the
    ratio unstable) is drawn at the frame's edge.
    """
    rows = df.dropna(subset=["attrib@value", "attrib@query"])
    archs = list(dict.fromkeys(rows["arch"]))
    col = palette or colours(archs)
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
    _legend_outside(ax)
    ax.set_title("Where the association is stored (key corrupted, clean residual at the read point;\n"
                 "hollow: not learned, drawn at the edge when outside the frame)", fontsize=8)
    return fig


def boxes_figure(df: pd.DataFrame, palette: dict[str, str] | None = None,
                 published: dict[tuple[str, str], float] | None = None) -> Figure:
    """attrib@key / @value / @query per architecture over its runs that learned the task: a box where it
    has at least MIN_BOX runs, its runs as points otherwise (a box over one run is a flat line);
    published: (arch, position) -> the study's median, drawn as a black tick."""
    rows = df.dropna(subset=["attrib@value"])
    rows = rows[_learned(rows)]
    archs = list(dict.fromkeys(rows["arch"]))
    palette = palette or colours(archs)
    fig, axes = plt.subplots(1, len(POSITIONS), figsize=(3.2 * len(POSITIONS), 3.4), sharey=True)
    for ax, pos in zip(axes, POSITIONS):
        for i, a in enumerate(archs):
            values = rows.loc[rows["arch"] == a, f"attrib@{pos}"].astype(float).tolist()
            if len(values) >= MIN_BOX:
                ax.boxplot([values], positions=[i], widths=0.6, medianprops={"color": palette[a]})
            ax.scatter([i + 0.08 * (k - (len(values) - 1) / 2) for k in range(len(values))], values, s=18,
                       color=palette[a], edgecolor="black", linewidth=0.4, zorder=3)
        marks = [(i, published[(a, pos)]) for i, a in enumerate(archs) if (a, pos) in (published or {})]
        if marks:
            ax.scatter(*zip(*marks), marker="_", s=300, color="black", zorder=4, label="published median")
        ax.set_xticks(range(len(archs)), archs, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"attrib @ {pos}")
        ax.axhline(0, color="grey", lw=0.5)
    axes[0].set_ylabel("attribution (one point per run)")
    if published:
        _legend_outside(axes[-1])
    return fig


def howto_figure(interventions: pd.DataFrame, arch: str) -> Figure:
    """The annotated example heatmap of "how to read this": one run's attributions (key corrupted, clean
    residual patched in at each role and block input, examples outside the conv reach), with the row the
    verdict reads outlined and its highest cell explained.

    interventions: one run's interventions.parquet (columns corrupt, direction, site, layer, position,
    attrib[, subset]).
    """
    rows = interventions[(interventions["corrupt"] == "key") & (interventions["direction"] == "sufficiency")]
    if "subset" in rows:
        rows = rows[rows["subset"] == ("outside" if (rows["subset"] == "outside").any() else "all")]
    site, layer = read_point(rows)
    grid = attrib_grid(rows, site)
    n_cols = grid.shape[1]  # the three roles, sep, joint patches, conv-window positions: sized per column
    fig, ax = plt.subplots(figsize=(2.6 + 0.95 * n_cols, 2.2 + 0.55 * grid.shape[0]), layout="constrained")
    im = ax.imshow(grid.to_numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(n_cols), grid.columns, fontsize=9)
    ax.set_yticks(range(grid.shape[0]), [f"input of layer {i}" for i in grid.index])
    for (i, j), v in pd.DataFrame(grid.to_numpy()).stack().items():
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8, color="w" if v < 0.5 else "k")
    row = list(grid.index).index(layer)
    ax.add_patch(plt.Rectangle((-0.5, row - 0.5), n_cols, 1, fill=False, edgecolor="red", lw=2))
    best = grid.loc[layer].astype(float).idxmax()
    reading = {"value": "induction: the association is stored at the value",
               "query": "direct retrieval: the answer is already at the query",
               "key": "direct retrieval: the layer itself combines key and value"}.get(best, "")
    ax.set_xlabel(f"read here (red row): @{best} = {grid.at[layer, best]:.2f}" + (f" → {reading}" if reading else ""),
                  fontsize=8, color="red")
    fig.colorbar(im, ax=ax, label="share of p(answer) restored", location="right", shrink=0.9)
    ax.set_title(f"{arch}: key corrupted, clean residual patched in at one position", fontsize=9)
    return fig
