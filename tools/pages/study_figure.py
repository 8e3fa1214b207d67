"""The study at a glance: each published finding beside ours (`make pages` draws it).

One figure per (task, scale) with committed studies, one panel per quantity (accuracy, @key, @value,
@query), one line per architecture: a dot per run of ours (the best learning rate of each study;
attributions only for runs that learned the task), the published value as a black diamond.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from mecheval.report import published  # noqa: E402
from mecheval.report.compare import published_accuracy, published_attribution  # noqa: E402
from mecheval.common import atomic_write_bytes  # noqa: E402
from mecheval.report.figures import OKABE_ITO, optimise_png  # noqa: E402

QUANTITIES = ("accuracy", "@key", "@value", "@query")
FIGURE_WIDTH_IN = 7  # inches: 672 px at 96 dpi, within the docs' ~690 px column
COMPARED = set(published.AR_ACCURACY) | {"deltanet"}  # the study's architectures (plug-ins are not compared)


def _published_attribution(task: str, grammar: str | None, arch: str) -> dict[str, float | None]:
    """role -> the published attribution of `arch` (AR: `published.AR_ATTRIBUTION`; ATR: the medians)."""
    if task == "ar":
        return published.AR_ATTRIBUTION.get(arch, {})
    return {role: published_attribution(task, grammar, arch, role) for role in published.ROLES}


def figure_data(tables: dict[Path, pd.DataFrame]) -> pd.DataFrame:
    """One row per (run or published value, quantity): task, scale, arch, quantity, source (ours /
    published), value, from `tables` (each study, results/SCALE/NAME, -> `results.study_table(every_run=True)`).
    Ours: the best-learning-rate runs of every study, for the architectures the study compares, with their
    default conv or none; `arch` names the width where the study's runs span several, an ATR grammar other than
    easy (`based · large_vocab`) and a held-out share of ATR's pairs (`based · 20% held out`)."""
    rows = []
    for study, df in tables.items():
        best = df[df["best_lr"] & df["arch_name"].isin(COMPARED)]
        best = best[best["arch_conv"].isna() | (best["arch_conv"] == 0)]
        several = best["model.d_model"].nunique() > 1  # each width its own line (`widths.py` draws the trend)
        for _, r in best.iterrows():
            grammar = r.get("task.params.grammar")
            grammar = grammar if isinstance(grammar, str) else None
            arch = f"{r['arch']} (d = {int(r['model.d_model'])})" if several else r["arch"]
            arch += f" · {grammar}" if grammar not in (None, "easy") else ""  # ATR's other grammars: rows of their own
            held_out = r.get("task.params.holdout_frac")
            arch += f" · {held_out:.0%} held out" if isinstance(held_out, float) and held_out > 0 else ""  # trained on less
            key = {"task": r["task.name"], "scale": study.parent.name, "arch": arch}
            run = f"{study}/{r['name']}"  # relative to the repository, wherever it is checked out
            acc = r.get("acc_outside")
            acc = r["acc"] if acc is None or acc != acc else acc
            rows.append({**key, "quantity": "accuracy", "source": "ours", "value": float(acc), "run": run})
            if isinstance(r.get("verdict"), str) and r["verdict"] != "not learned":
                rows += [{**key, "quantity": f"@{role}", "source": "ours", "value": float(r[f"attrib@{role}"]),
                          "run": run} for role in published.ROLES]
            pub = {"accuracy": published_accuracy(r["task.name"], grammar, r["arch_name"], r["arch_conv"] if r["arch_conv"] == r["arch_conv"] else None,
                                                  int(r["model.d_model"]), r["arch"])}
            pub |= {f"@{k}": v for k, v in _published_attribution(r["task.name"], grammar, r["arch"]).items()}
            rows += [{**key, "quantity": q, "source": "published", "value": float(v), "run": ""}
                     for q, v in pub.items() if v is not None]
    df = pd.DataFrame(rows, columns=["task", "scale", "arch", "quantity", "source", "value", "run"])
    df = df.drop_duplicates(["task", "scale", "arch", "quantity", "source", "run"])
    return df.sort_values(["task", "scale", "arch", "quantity", "source", "run"], kind="stable").reset_index(drop=True)


def groups(data: pd.DataFrame) -> list[tuple[str, str]]:
    """The (task, scale) pairs of `figure_data`'s table, each drawn as a figure of its own (`draw`)."""
    return sorted(set(zip(data["task"], data["scale"])))


def figure_name(task: str, scale: str) -> str:
    """The file name of one (task, scale)'s figure: `ar-paper-d64.png`."""
    return f"{task}-{scale}.png"


def draw(data: pd.DataFrame, path: Path, task: str, scale: str) -> None:
    """`study_panels` of one (task, scale) as an optimised PNG at `path`."""
    save_figure(study_panels(data, task, scale), path)


def study_panels(data: pd.DataFrame, task: str, scale: str) -> plt.Figure:
    """One (task, scale)'s rows of `figure_data`'s table: a panel per quantity (2 x 2), one line per architecture,
    its dots ours (one per run) and its diamond the published value; FIGURE_WIDTH_IN wide, so that at 96 dpi
    the docs show it at its own size and its text (>= 9 pt) stays >= 12 px."""
    g = data[(data["task"] == task) & (data["scale"] == scale)]
    archs = sorted(g["arch"].unique())
    ys = {a: j for j, a in enumerate(archs)}
    fig, axes = plt.subplots(2, 2, figsize=(FIGURE_WIDTH_IN, 2 * (0.3 * len(archs) + 0.9) + 0.8), sharey=True, layout="constrained")
    for ax, q in zip(axes.flat, QUANTITIES):
        ours, pub = g[(g["quantity"] == q) & (g["source"] == "ours")], g[(g["quantity"] == q) & (g["source"] == "published")]
        ax.scatter(ours["value"], ours["arch"].map(ys), s=24, color=OKABE_ITO[0], alpha=0.75, label="ours (a run)")
        ax.scatter(pub["value"], pub["arch"].map(ys), s=50, marker="D", facecolor="none", edgecolor="k",
                   linewidth=1.2, label="published")
        ax.set_yticks(range(len(ys)), list(ys), fontsize=9)
        ax.set_ylim(len(ys) - 0.5, -0.5)
        ax.set_xlim(-0.1, 1.15)
        ax.axvline(0.8, color="0.85", lw=0.8, zorder=0)
        ax.grid(axis="y", color="0.93")
        ax.tick_params(axis="x", labelsize=9)
        ax.set_title(q, fontsize=10)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=9, frameon=False)
    fig.suptitle(f"{task.upper()}, {scale}: the published values (◇) beside ours (●)", fontsize=10)
    return fig


def save_figure(fig, path: Path) -> None:
    """`fig` as a PNG at `path` (folders made; no software stamp, so a redraw of the same data is the same file), optimised
    (`figures.optimise_png`), written whole and not through a link (`common.atomic_write_bytes`); the figure is closed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, optimise_png(buf.getvalue()))
