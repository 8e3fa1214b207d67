"""`build_report(study_dir)`: report.md, a self-contained report.html and figures/ from a study's runs.

Sections: the published findings checked; accuracy (best learning rate per architecture and width,
the published figure beside ours); the mechanism verdicts beside the published ones; seeds (mean and
spread where several ran); figures (accuracy, attribution scatter and boxes, heatmaps of the best run
per architecture and site, as `mecheval intervene` drew them).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from scipy import stats

from mecheval.report import figures
from mecheval.report.compare import published_accuracy, published_verdict
from mecheval.report.html import render_html
from mecheval.report.findings import FINDINGS, conv_evidence
from mecheval.report.results import study_table
from mecheval.sweeps.runner import RUNS

STUDY_JSON = "study.json"  # written by `mecheval study`: preset, scale, timings
HEATMAPS = "interventions/key_*.png"  # drawn by `mecheval intervene`: corrupt key, one per site
RESID_HEATMAP = "key_resid_pre.png"


@dataclass
class Report:
    markdown: Path
    html: Path
    summary: pd.DataFrame  # one row per (architecture, width): what the terminal shows


def _agree(ours, theirs) -> str:
    """agree / disagree; blank where either side has no verdict or ours did not learn the task."""
    if not isinstance(theirs, str) or not isinstance(ours, str) or ours == "not learned":
        return ""
    return "agree" if ours == theirs else "disagree"


def _mode(values: pd.Series):
    """The most common value (ties: the first in sorted order); None where all are missing."""
    counts = values.dropna().value_counts()
    return None if counts.empty else sorted(counts[counts == counts.max()].index)[0]


GRAMMAR = "task.params.grammar"
MEANS = ("acc", "acc_heldout", "acc_outside", "attrib@key", "attrib@value", "attrib@query", "effect")
INTERVALS = ("acc_outside", "attrib@key", "attrib@value", "attrib@query")  # shown with a 95% interval


def _interval(group: pd.DataFrame, col: str) -> tuple[float, float]:
    """95% interval of `col` for one (architecture, width, lr): over seeds (t) where there are several,
    else the run's own (Wilson for accuracy, bootstrap for attributions)."""
    values = group[col].dropna().astype(float)
    if len(values) >= 2:
        half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / len(values) ** 0.5
        lo, hi = values.mean() - half, values.mean() + half
        return (max(lo, 0.0), min(hi, 1.0)) if col.startswith("acc") else (lo, hi)
    lo, hi = f"{col}_lo", f"{col}_hi"
    if len(values) == 1 and lo in group and group[lo].notna().any():
        row = group.loc[values.index[0]]
        return float(row[lo]), float(row[hi])
    return float("nan"), float("nan")


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Best-lr runs, one row per (arch, width[, grammar]): accuracy and attributions averaged over seeds
    (`seeds` counts them), the most common verdict, and the published figures beside."""
    best = df[df["best_lr"]]
    by = ["arch", "model.d_model", "optim.lr"] + ([GRAMMAR] if GRAMMAR in best else [])
    means = [c for c in MEANS if c in best]
    g = best.groupby(by, sort=False, dropna=False)
    out = g[means].mean().join(g.agg(seeds=("seed", "nunique"), verdict=("verdict", _mode), task=("task.name", "first"),
                                     verdicts=("verdict", _counts)))
    shown = [c for c in INTERVALS if c in best]
    bounds = {key: {c: _interval(part, c) for c in shown} for key, part in g}
    for c in shown:
        out[f"{c}_lo"] = [bounds[k][c][0] for k in out.index]
        out[f"{c}_hi"] = [bounds[k][c][1] for k in out.index]
    if "detail" in best:  # the detail of the most accurate seed whose verdict is the most common one
        out["detail"] = [_detail(part, out.at[key, "verdict"]) for key, part in g]
    out = out.reset_index()
    grammar = out[GRAMMAR] if GRAMMAR in out else pd.Series(None, index=out.index)
    parts = df.drop_duplicates("arch").set_index("arch")  # each label's (name, conv), as data
    out["published_acc"] = [published_accuracy(t, gr, parts.at[a, "arch_name"], parts.at[a, "arch_conv"], int(w))
                            for t, gr, a, w in zip(out["task"], grammar, out["arch"], out["model.d_model"])]
    out["published_verdict"] = [published_verdict(t, a) for t, a in zip(out["task"], out["arch"])]
    out["agree"] = [_agree(o, p) for o, p in zip(out["verdict"], out["published_verdict"])]
    shown_grammar = [GRAMMAR] if GRAMMAR in out and out[GRAMMAR].nunique() > 1 else []
    with_ci = [x for c in shown for x in (c, f"{c}_lo", f"{c}_hi")]
    cols = ["arch", *shown_grammar, "model.d_model", "optim.lr", "seeds", "acc",
            *(["acc_heldout"] if "acc_heldout" in out else []), *[c for c in with_ci if c.startswith("acc")],
            "published_acc", "verdict", "verdicts", *(["detail"] if "detail" in out else []), "published_verdict",
            "agree", *[c for c in with_ci if c.startswith("attrib")], "effect"]
    for c in ("attrib@key", "attrib@value", "attrib@query"):
        if c not in cols:
            cols.insert(cols.index("effect"), c)
    return out[cols].astype({"published_acc": float}).reset_index(drop=True)


def _counts(values: pd.Series) -> str:
    """How many seeds got each verdict, e.g. `induction 1, direct retrieval 2` (most common first)."""
    counts = values.dropna().value_counts()
    return ", ".join(f"{label} {n}" for label, n in counts.items())


def _detail(part: pd.DataFrame, verdict) -> str | None:
    rows = part[part["verdict"] == verdict] if isinstance(verdict, str) else part
    rows = rows.dropna(subset=["detail"])
    return None if rows.empty else rows.sort_values("acc", ascending=False)["detail"].iloc[0]


def readable(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary for people: each number with its 95% interval in one cell, `–` where it means nothing
    (attributions of a model that did not learn)."""
    out = summary.copy()
    for c in INTERVALS:
        if f"{c}_lo" not in out:
            continue
        out[c] = [
            "–" if (c.startswith("attrib") and v == "not learned") or m != m
            else f"{m:.2f}" if lo != lo else f"{m:.2f} [{lo:.2f}, {hi:.2f}]"
            for m, lo, hi, v in zip(out[c], out[f"{c}_lo"], out[f"{c}_hi"], out["verdict"])
        ]
        out = out.drop(columns=[f"{c}_lo", f"{c}_hi"])
    return out


def accuracy_bars(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with one bar label per row: `arch · grammar` where the study ran several grammars."""
    return summary.assign(arch=summary["arch"] + " · " + summary[GRAMMAR]) if GRAMMAR in summary else summary


def seeds_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """Mean and spread of accuracy and attrib@value over seeds per (arch, width, lr); None for one seed."""
    if df["seed"].nunique() < 2:
        return None
    g = df.groupby(["arch", "model.d_model", "optim.lr"])
    out = g.agg(seeds=("seed", "nunique"), acc_mean=("acc", "mean"), acc_std=("acc", "std"),
                acc_min=("acc", "min"), acc_max=("acc", "max"))
    if df["attrib@value"].notna().any():
        out = out.join(g["attrib@value"].agg(value_mean="mean", value_std="std"))
    return out.reset_index()


def artefact_table(best: pd.DataFrame) -> pd.DataFrame:
    """Per best-lr run: accuracy (Wilson interval, n) on all / outside / inside examples."""
    rows = []
    for _, r in best.iterrows():
        path = Path(r["run_dir"]) / "accuracy.parquet"
        if not path.exists():
            continue
        acc = pd.read_parquet(path).set_index("subset")
        row = {"arch": r["arch"], "seed": r["seed"]}
        for subset in ("all", "outside", "inside"):
            if subset in acc.index and acc.at[subset, "n"] > 0:
                a = acc.loc[subset]
                row[subset] = f"{a['acc']:.2f} [{a['acc_lo']:.2f}, {a['acc_hi']:.2f}] (n={int(a['n'])})"
            else:
                row[subset] = "–"
        rows.append(row)
    return pd.DataFrame(rows)


def formation_table(best: pd.DataFrame) -> pd.DataFrame:
    """Per best-lr run with a conv-window analysis: the cell that restores most and the tap ablation."""
    rows = []
    for _, r in best.iterrows():
        e = conv_evidence(r["run_dir"]) if isinstance(r.get("run_dir"), str) else None
        if e is None:
            continue
        rows.append({"arch": r["arch"], "seed": r["seed"], "verdict": r.get("verdict"),
                     "cell": f"conv_out L{e['layer']} key+{e['offset']}",
                     "restores": f"{e['attrib']:.2f} [{e['lo']:.2f}, {e['hi']:.2f}]",
                     "acc": f"{e['acc']:.2f}", "acc, taps of that layer zeroed": f"{e['cut_acc']:.2f} (n={e['cut_n']})"})
    return pd.DataFrame(rows)


def _fmt(df: pd.DataFrame) -> pd.DataFrame:
    return df.map(lambda v: f"{v:.3g}" if isinstance(v, float) and v == v else ("" if v is None or v != v else v))


def build_report(study_dir: str | Path) -> Report:
    study_dir = Path(study_dir)
    meta_path = study_dir / STUDY_JSON
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    df = study_table(study_dir)
    summary = summarise(df)
    best = df[df["best_lr"]]
    findings = [(FINDINGS[f].claim, FINDINGS[f].check(best)) for f in meta.get("findings", [])]
    seeds = seeds_table(df)

    fig_dir = study_dir / "figures"
    fig_dir.mkdir(exist_ok=True)
    pngs: dict[str, bytes] = {"accuracy": figures.to_png(figures.accuracy_figure(accuracy_bars(summary)))}
    if summary["attrib@value"].notna().any():
        with_verdict = df[df["verdict"].notna()]
        pngs["attribution_scatter"] = figures.to_png(figures.scatter_figure(with_verdict))
        if (with_verdict["verdict"] != "not learned").any():
            pngs["attribution_boxes"] = figures.to_png(figures.boxes_figure(with_verdict))
    best_runs = best.sort_values("acc", ascending=False).drop_duplicates("arch")
    for _, row in best_runs.iterrows():
        run_dir = study_dir / RUNS / row["name"]
        for extra in ("key_profile", "conv_window"):  # the layer profile, and where a short conv binds
            if (run_dir / "interventions" / f"{extra}.png").exists():
                pngs[f"{extra.removeprefix('key_')} {row['arch']}"] = (run_dir / "interventions" / f"{extra}.png").read_bytes()
        # the residual stream first, then the sites inside the mixers (conv_out, core_out, ...)
        paths = sorted((p for p in run_dir.glob(HEATMAPS) if p.stem != "key_profile"),
                       key=lambda p: (p.name != RESID_HEATMAP, p.name))
        for path in paths:
            site = path.stem.removeprefix("key_")
            pngs[f"heatmap {row['arch']}" + ("" if path.name == RESID_HEATMAP else f" {site}")] = path.read_bytes()
    files = {}
    for name, data in pngs.items():
        files[name] = fig_dir / f"{name.replace(' ', '_').replace('(', '').replace(')', '')}.png"
        files[name].write_bytes(data)

    findings_df = pd.DataFrame([{"finding": c, "status": o.status, "evidence": o.evidence} for c, o in findings])
    title = f"mecheval study: {meta.get('preset', study_dir.name)}" + (f" ({meta['scale']} scale)" if "scale" in meta else "")
    sections = [
        ("Findings", findings_df, "The published findings this study tests, checked on the best-learning-rate runs "
         "(every seed), on the examples outside the conv reach."),
        ("Accuracy and mechanism", readable(summary), "Best learning rate per architecture and width (final step). "
         "`acc` is the final test accuracy; `acc_outside` the accuracy on the intervention examples whose queried "
         "pair lies outside the query's reach through short convs (the artefact control), with a 95% interval "
         "(over seeds where several ran, else Wilson). Verdict, detail and attributions (corrupt the key, patch the "
         "clean residual at the read point, 95% interval) are read on those examples. Published figures are for "
         "the published task and sizes."),
        ("Accuracy and the conv-reach artefact", artefact_table(best), "Accuracy of each best-lr run on all "
         "intervention examples, on those outside the query's reach through short convs, and inside it (AR: the "
         "queried pair among the last ones), with Wilson 95% intervals and example counts."),
    ]
    formed = formation_table(best)
    if not formed.empty:
        sections.append(("Where the association is formed", formed, "Runs with a short conv: the conv output cell "
                         "(layer, offset from the queried key) whose clean value restores most of the answer "
                         "(sufficiency, 95% bootstrap interval), and the accuracy with that layer's conv taps of "
                         "lag >= 1 zeroed (every position then sees only itself)."))
    if seeds is not None:
        sections.append(("Seeds", seeds, "Mean and spread over seeds."))
    runs_cols = ["name", "arch", "model.d_model", "optim.lr", "seed", "status", "acc", "acc_heldout", "verdict",
                 "summary.wall_time_s"]
    sections.append(("All runs", df[[c for c in runs_cols if c in df]], ""))

    md = [f"# {title}", "", meta.get("description", ""), ""]
    if meta.get("wall_time_s"):
        md += [f"Wall time: {meta['wall_time_s'] / 60:.1f} min ({meta.get('cpu_drops', '')}).", ""]
    for head, table, note in sections:
        md += [f"## {head}", "", note, "", _fmt(table).to_markdown(index=False) if len(table) else "(none)", ""]
    md += ["## Figures", ""] + [f"![{n}](figures/{p.name})" for n, p in files.items()]
    markdown = study_dir / "report.md"
    markdown.write_text("\n".join(md) + "\n")

    images = {n: base64.b64encode(d).decode() for n, d in pngs.items()}
    html = study_dir / "report.html"
    html.write_text(render_html(title, meta, [(h, _fmt(t), n) for h, t, n in sections], images))
    return Report(markdown, html, summary)
