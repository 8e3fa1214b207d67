"""The study at a glance: each published finding beside ours, one figure (`mecheval pages` draws it).

One row of panels per (task, scale) with committed studies, one panel per quantity (accuracy, @key,
@value, @query), one line per architecture: a dot per run of ours (the best learning rate of each study;
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
COMPARED = set(published.AR_ACCURACY) | {"deltanet"}  # the study's architectures (plug-ins are not compared)


def _published_attribution(task: str, grammar: str | None, arch: str) -> dict[str, float | None]:
    """role -> the published attribution of `arch` (AR: `published.AR_ATTRIBUTION`; ATR: the medians)."""
    if task == "ar":
        return published.AR_ATTRIBUTION.get(arch, {})
    return {role: published_attribution(task, grammar, arch, role) for role in published.ROLES}


def figure_data(root: Path) -> pd.DataFrame:
    """One row per (run or published value, quantity): task, scale, arch, quantity, source (ours /
    published), value. Ours: the best-learning-rate runs of every study with a study.json, for the
    architectures the study compares, with their default conv or none; `arch` names the width where the
    study's runs span several, an ATR grammar other than easy (`based · large_vocab`) and a held-out share of
    ATR's pairs (`based · 20% held out`)."""
    from mecheval.report.build import study_meta
    from mecheval.report.pages import _table, studies

    rows = []
    for study in studies(root):
        if not study_meta(root / study):
            continue
        df = _table(str(root / study))
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


def draw(data: pd.DataFrame, path: Path) -> None:
    """The figure from `figure_data`'s table, as an optimised PNG at `path` (optipng where installed)."""
    groups = list(data.groupby(["task", "scale"], sort=True))
    archs = {k: sorted(g["arch"].unique()) for k, g in groups}
    heights = [0.32 * len(archs[k]) + 0.7 for k, _ in groups]
    fig, axes = plt.subplots(len(groups), len(QUANTITIES), figsize=(11, sum(heights) + 0.6), squeeze=False,
                             sharex=True, gridspec_kw={"height_ratios": heights}, layout="constrained")
    colour = {s: OKABE_ITO[i] for i, s in enumerate(sorted(data["scale"].unique()))}
    for i, ((task, scale), g) in enumerate(groups):
        ys = {a: j for j, a in enumerate(archs[(task, scale)])}
        for j, q in enumerate(QUANTITIES):
            ax = axes[i, j]
            ours, pub = g[(g["quantity"] == q) & (g["source"] == "ours")], g[(g["quantity"] == q) & (g["source"] == "published")]
            ax.scatter(ours["value"], ours["arch"].map(ys), s=22, color=colour[scale], alpha=0.75, label=f"ours, {scale} (a run)")
            ax.scatter(pub["value"], pub["arch"].map(ys), s=46, marker="D", facecolor="none", edgecolor="k",
                       linewidth=1.2, label="published")
            ax.set_yticks(range(len(ys)), list(ys) if j == 0 else [""] * len(ys), fontsize=8)
            ax.set_ylim(len(ys) - 0.5, -0.5)
            ax.set_xlim(-0.1, 1.15)
            ax.axvline(0.8, color="0.85", lw=0.8, zorder=0)
            ax.grid(axis="y", color="0.93")
            ax.tick_params(axis="x", labelsize=8)
            if i == 0:
                ax.set_title(q, fontsize=10)
            if j == 0:
                ax.set_ylabel(f"{task.upper()}, {scale}", fontsize=9)
    legend = {}  # label -> handle, over every row (one colour per scale)
    for ax in axes[:, 0]:
        legend |= dict(zip(*reversed(ax.get_legend_handles_labels())))
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncol=len(legend), fontsize=8, frameon=False)
    fig.suptitle("mecheval: the published findings (◇) beside ours (●, one per run), per architecture", fontsize=11)
    save_figure(fig, path)


def save_figure(fig, path: Path) -> None:
    """`fig` as a PNG at `path` (folders made; no software stamp, so a redraw of the same data is the same file), optimised
    (`figures.optimise_png`), written whole and not through a link (`common.atomic_write_bytes`); the figure is closed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, optimise_png(buf.getvalue()))
