"""`build_report(study_dir)`: report.md, a self-contained report.html, summary.csv and figures/ from a
study's runs.

Sections: the summary (a paragraph and a small table, `overview`); how to read an intervention (three
sentences and an annotated heatmap); the published findings checked; accuracy and mechanism per
architecture (human column names, every number with its interval, the full table one click away);
the conv-reach artefact; where a short conv binds key and value; seeds; every run; figures, each with a
caption saying what is patched and how to read it.
"""

from __future__ import annotations

import base64
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from mecheval.common import (ConfigError, atomic_write_bytes, atomic_write_text, read_json_object, read_table, safe_mkdir,
                             safe_unlink)
from mecheval.interventions.accuracy import ACCURACY_COLUMNS
from mecheval.plugins import reading_results
from mecheval.training.lock import DirLock
from mecheval.interventions.state_readout import COLUMNS as STATE_COLUMNS, state_summary
from mecheval.interventions.verdict import shows_attributions
from mecheval.report import figures
from mecheval.report.compare import (HELDOUT_ACC_CELL, HELDOUT_VALUE_CELL, heldout_cells, published_accuracy,
                                     published_attribution, published_heldout, published_verdict)
from mecheval.report.decide import RULE, compare_accuracy, compare_labels, multi_bootstrap
from mecheval.report.html import render_html
from mecheval.report.fit import FIT_NOTE, fit_table
from mecheval.report.findings import FINDINGS, Outcome, checked, conv_evidence, finding_row, seed_pairs
from mecheval.report.overview import GRAMMAR, by_grammar, overview_table, overview_text, with_interval
from mecheval.report.paired import paired_runs
from mecheval.report.results import HELDOUT_READ_ACC, HELDOUT_VALUE, study_table
from mecheval.sweeps.table import runs_dir
from mecheval.report.timelines import formation_steps, overlay_figure, run_figure, timeline_table
from mecheval.report.widths import readable_widths, spans_widths, width_figure, width_table

STUDY_JSON = "study.json"  # written by `mecheval study`: preset, scale, timings
HEATMAPS = "key_*.png"  # in each run's interventions/, drawn by `mecheval intervene`: corrupt key, one per site
RESID_HEATMAP = "key_resid_pre.png"


@dataclass
class Report:
    markdown: Path
    html: Path
    summary: pd.DataFrame  # one row per (architecture, width): what the terminal shows
    overview: str = ""  # the summary paragraph, the same in the HTML, report.md and the terminal
    findings: list[tuple[str, Outcome]] = field(default_factory=list)  # (claim, outcome) per published finding checked


@dataclass
class Section:
    head: str
    note: str
    table: pd.DataFrame  # for people: human column names, numbers with their intervals
    raw: pd.DataFrame | None = None  # every column, one click away in the HTML


HOW_TO_READ = (
    "Each example is run twice: clean, and with the queried key replaced by another key (corrupted), which "
    "moves the model's probability away from the right answer. We then run the corrupted input again with "
    "one activation copied from the clean run, at one layer and one role's position (key, value, query), "
    "and report the share of the lost probability that comes back (attrib: 0 nothing, 1 all). "
    "A high share at the value means the association was stored there before the query arrived "
    "(induction); at the query or the key with nothing at the value, the model retrieves the answer "
    "directly (direct retrieval)."
)

HUMAN = {  # column -> header for people
    "arch": "architecture", GRAMMAR: "grammar", "model.d_model": "width", "optim.lr": "learning rate",
    "seeds": "seeds", "acc": "test accuracy", "acc_heldout": "held-out accuracy",
    "acc_outside": "accuracy outside conv reach [95% CI]", "published_acc": "published accuracy",
    "verdict": "mechanism", "verdicts": "mechanism per seed", "published_verdict": "published mechanism",
    "agree": "agrees", "attrib@key": "@key [95% CI]", "attrib@value": "@value [95% CI]",
    "attrib@query": "@query [95% CI]", HELDOUT_VALUE: "held-out @value [95% CI]",
}

CAPTIONS = {  # figure name prefix -> caption (`{arch}` and `{site}` filled in)
    "accuracy": "Accuracy per architecture at its best learning rate, on the examples outside the conv reach "
                "where the runs were intervened on (bars, with 95% multi-bootstrap intervals over seeds, or Wilson "
                "for one run); black ticks: the published accuracy for the published task and size.",
    "accuracy_by_width": "Accuracy against width, at each width's best learning rate: ours as solid lines (markers "
                         "with 95% multi-bootstrap intervals over seeds, or Wilson for one run; outside the conv "
                         "reach where intervened on), the published accuracy as dashed lines in the same colour, on "
                         "a log2 width axis. One panel for the architectures at their published convs, one per architecture whose conv sizes "
                         "the study varies; dotted: the findings' thresholds of failure and high accuracy.",
    "attribution_scatter": "One point per run. Key corrupted; the clean residual stream patched in at the read "
                           "point, at the value (y) or at the query (x). Top left: induction; bottom right: direct "
                           "retrieval. Bars: 95% bootstrap intervals; hollow: the run did not learn the task.",
    "attribution_boxes": "The same attributions at the key, the value and the query, per architecture, one point "
                         "per run that learned the task (a box where there are at least 3); black ticks: the "
                         "study's published medians (ATR, where it states them).",
    "profile": "{arch}, layer profile: the share of p(answer) restored by the clean residual at each role, at "
               "every block boundary (key corrupted; band: 95% interval). Where a line rises is the layer that "
               "moves the key's information there.",
    "conv_window": "{arch}, where its short conv binds key and value: the clean (sufficiency) or corrupted "
                   "(necessity) conv input or output patched in at key + o, in each layer. A cell near 1 is "
                   "where the association is formed.",
    "state": "{arch}, what each layer's recurrent state carries: the clean state after the key + o (left) or "
             "after answer − d (right) patched into the corrupted run (solid; dashed: the corrupted state into the "
             "clean run), with 95% intervals. Where a curve rises, the association enters that state; its value "
             "at −1 is what the state carries when the answer is read.",
    "timeline": "{arch} over training: accuracy (dashed) and the clean residual patched in at the key, value "
                "and query at the final verdict's read point, at every kept step (95% bands); the band along the "
                "top is the verdict at that step, the dotted line the step from which it stays the final one.",
    "timeline_overlay": "Every best-lr run over training: accuracy (left) and @value at its final read point "
                        "(right) against step, coloured by architecture.",
    "heatmap": "{arch}: key corrupted; clean {site} patched in at each (layer, role). Colour: share of "
               "p(answer) restored (0 nothing, 1 all).",
}

WIDTHS_NOTE = ("Each width's best-learning-rate accuracy (as above, with its 95% interval: the multi-bootstrap over "
               "seeds where several ran, else Wilson) beside the published one, compared point by point: " + RULE + ".")


def _listed(seeds: pd.Series) -> str:
    """`0, 1, 2`: the seeds of a group, sorted."""
    return ", ".join(str(int(v)) for v in sorted(set(seeds.dropna())))


def _mode(values: pd.Series):
    """The most common value (ties: the first in sorted order), counting decided verdicts only (an
    `inconclusive` one where no seed was decided); None where all are missing."""
    decided = values[values != "inconclusive"].dropna()
    counts = (decided if len(decided) else values.dropna()).value_counts()
    return None if counts.empty else sorted(counts[counts == counts.max()].index)[0]


MEANS = ("acc", "acc_heldout", "acc_outside", "acc_all", "attrib@key", "attrib@value", "attrib@query", HELDOUT_READ_ACC,
         HELDOUT_VALUE, "effect")
INTERVALS = ("acc_outside", "acc_all", "attrib@key", "attrib@value", "attrib@query", HELDOUT_READ_ACC,
             HELDOUT_VALUE)  # shown with a 95% interval


def _examples_of(col: str) -> str:
    """The column counting the examples behind an accuracy column: `acc_outside` -> `n_outside`,
    `heldout.acc_all` -> `heldout.n_all`."""
    split, _, name = col.rpartition(".")
    return (f"{split}." if split else "") + name.replace("acc_", "n_", 1)


def interval_over_seeds(group: pd.DataFrame, col: str) -> tuple[float, float]:
    """95% interval of `col` for one (architecture, width, lr): over seeds where there are several, the
    multi-bootstrap's (`decide.multi_bootstrap`: seeds and, within each, its examples resampled; an accuracy's
    examples from its count, an attribution's from its own interval), else the run's own (Wilson for
    accuracy, bootstrap for attributions)."""
    rows = group[group[col].notna()]
    lo, hi, n = (rows[c].astype(float).tolist() if c in rows else [float("nan")] * len(rows)
                 for c in (f"{col}_lo", f"{col}_hi", _examples_of(col)))
    accuracy = col.startswith(("acc", "heldout.acc"))
    if len(rows) >= 2:
        lo_, hi_ = multi_bootstrap(rows[col].astype(float).tolist(), lo, hi, n if accuracy else None)  # an accuracy's
        return (max(lo_, 0.0), min(hi_, 1.0)) if accuracy else (lo_, hi_)  # examples from their count where known
    return (lo[0], hi[0]) if len(rows) == 1 else (float("nan"), float("nan"))


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Best-lr runs, one row per (arch, width[, grammar]): accuracy averaged over seeds (`seeds` counts them),
    attributions over the seeds that learned (a run that did not has no mechanism to read: its attributions are
    noise), the most common verdict, the task's chance accuracy where the runs' table has it, and the published
    figures beside."""
    best = df[df["best_lr"]].copy()
    if "verdict" in best:
        noise = [c for c in best if c.startswith(("attrib@", "window@"))]
        best.loc[~best["verdict"].map(shows_attributions), noise] = float("nan")
    by = ["arch", "model.d_model", "optim.lr"] + ([GRAMMAR] if GRAMMAR in best else [])
    means = [c for c in MEANS if c in best]
    g = best.groupby(by, sort=False, dropna=False)
    out = g[means].mean().join(g.agg(seeds=("seed", "nunique"), verdict=("verdict", _mode), task=("task.name", "first"),
                                     verdicts=("verdict", _counts), seed_list=("seed", _listed)))
    if "n" in best:  # the examples each verdict was read on (outside the conv reach), least and most over seeds
        out = out.join(g.agg(n_min=("n", "min"), n_max=("n", "max")))
    if "chance" in best:  # the task's chance accuracy (one task per row)
        out = out.join(g.agg(chance=("chance", "first")))
    shown = [c for c in INTERVALS if c in best]
    bounds = {key: {c: interval_over_seeds(part, c) for c in shown} for key, part in g}
    for c in shown:
        out[f"{c}_lo"] = [bounds[k][c][0] for k in out.index]
        out[f"{c}_hi"] = [bounds[k][c][1] for k in out.index]
    if "detail" in best:  # the detail of the most accurate seed whose verdict is the most common one
        out["detail"] = [_detail(part, out.at[key, "verdict"]) for key, part in g]
    out = out.reset_index()
    grammar = out[GRAMMAR] if GRAMMAR in out else pd.Series(None, index=out.index)
    parts = df.drop_duplicates("arch").set_index("arch")  # each label's (name, conv), as data
    out["published_acc"] = [published_accuracy(t, gr, parts.at[a, "arch_name"], parts.at[a, "arch_conv"], int(w), a)
                            for t, gr, a, w in zip(out["task"], grammar, out["arch"], out["model.d_model"])]
    out["published_verdict"] = [published_verdict(t, a) for t, a in zip(out["task"], out["arch"])]
    out["agree"] = [compare_labels(o, p) for o, p in zip(out["verdict"], out["published_verdict"])]
    heldout = "acc_heldout" in out
    if heldout:
        pub = [published_heldout(a, int(w)) for a, w in zip(out["arch"], out["model.d_model"])]
        out["published_heldout_acc"] = [a for a, _ in pub]
        out["published_heldout_value"] = [v for _, v in pub]
        none = pd.Series(float("nan"), index=out.index)  # the held-out readout's accuracy against the study's
        out["heldout_agree"] = [compare_accuracy(m, lo, hi, p) for m, lo, hi, p in zip(
            out.get(HELDOUT_READ_ACC, none), out.get(f"{HELDOUT_READ_ACC}_lo", none),
            out.get(f"{HELDOUT_READ_ACC}_hi", none), out["published_heldout_acc"])]
    shown_grammar = [GRAMMAR] if GRAMMAR in out and out[GRAMMAR].nunique() > 1 else []
    with_ci = [x for c in shown for x in (c, f"{c}_lo", f"{c}_hi")]
    cols = ["arch", *shown_grammar, "model.d_model", "optim.lr", "seeds", "acc", *(["chance"] if "chance" in out else []),
            *(["acc_heldout", *[c for c in with_ci if c.startswith(HELDOUT_READ_ACC)], "published_heldout_acc",
               "heldout_agree"] if heldout else []), *[c for c in with_ci if c.startswith("acc")],
            "published_acc", "verdict", "verdicts", *(["detail"] if "detail" in out else []), "published_verdict",
            "agree", *[c for c in with_ci if "attrib@" in c], *(["published_heldout_value"] if heldout else []),
            "effect", "seed_list", *([c for c in ("n_min", "n_max") if c in out])]
    for c in ("attrib@key", "attrib@value", "attrib@query"):
        if c not in cols:
            cols.insert(cols.index("effect"), c)
    floats = {c: float for c in ("published_acc", "published_heldout_acc", "published_heldout_value") if c in cols}
    return out[cols].astype(floats).reset_index(drop=True)


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
            "–" if "attrib@" in c and not shows_attributions(v) else with_interval(m, lo, hi)
            for m, lo, hi, v in zip(out[c], out[f"{c}_lo"], out[f"{c}_hi"], out["verdict"])
        ]
        out = out.drop(columns=[f"{c}_lo", f"{c}_hi"])
    return out


def for_people(summary: pd.DataFrame) -> pd.DataFrame:
    """`readable(summary)` with human headers (HUMAN), without the columns kept for the full table
    (the detail, which the summary shows, the raw effect size, the seeds and example counts the first
    sentence states, the chance accuracy the terminal's table shows); `mechanism per seed` only where several
    seeds ran."""
    out = readable(summary)
    drop = ["detail", "effect", "acc_all", "seed_list", "n_min", "n_max", "chance"] + (["verdicts"] if summary["seeds"].max() < 2 else [])
    out = out.drop(columns=[c for c in drop if c in out])
    out["optim.lr"] = [f"{v:g}" for v in out["optim.lr"]]
    two = lambda v: "–" if v != v else f"{v:.2f}"  # noqa: E731
    for c in ("acc", "acc_heldout", "published_acc"):
        if c in out:
            out[c] = [two(v) for v in out[c].astype(float)]
    if "published_heldout_acc" in out:  # the held-out figures with the study's beside, each in one cell
        ours = out.pop(HELDOUT_READ_ACC) if HELDOUT_READ_ACC in out else out["acc_heldout"]  # with its interval
        values = out[HELDOUT_VALUE] if HELDOUT_VALUE in out else ["–"] * len(out)
        cells = [heldout_cells(*c) for c in zip(ours, out.pop("published_heldout_acc"), out.pop("heldout_agree"),
                                                values, out.pop("published_heldout_value"))]
        out["acc_heldout"] = [c[HELDOUT_ACC_CELL] for c in cells]
        if HELDOUT_VALUE in out:
            out[HELDOUT_VALUE] = [c[HELDOUT_VALUE_CELL] for c in cells]
    return out.rename(columns=HUMAN | {"acc_heldout": HELDOUT_ACC_CELL, HELDOUT_VALUE: HELDOUT_VALUE_CELL})


def accuracy_bars(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with one bar label per row: `arch · grammar` where the study ran several grammars."""
    return summary.assign(arch=by_grammar(summary["arch"], summary.get(GRAMMAR)))


def seeds_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """Per (arch, width, lr): accuracy over seeds (mean, sd, min, max) and attrib@value over the seeds
    that learned the task (blank where none did); None for one seed."""
    if df["seed"].nunique() < 2:
        return None
    g = df.groupby(["arch", "model.d_model", "optim.lr"], sort=False)
    out = g.agg(seeds=("seed", "nunique"), acc_mean=("acc", "mean"), acc_std=("acc", "std"),
                acc_min=("acc", "min"), acc_max=("acc", "max"))
    learned = df[df["verdict"].notna() & (df["verdict"] != "not learned")]
    if not learned.empty:
        value = learned.groupby(["arch", "model.d_model", "optim.lr"], sort=False)["attrib@value"]
        out = out.join(value.agg(value_mean="mean", value_std="std", learned="count"))
    out = out.reset_index()
    out["optim.lr"] = [f"{v:g}" for v in out["optim.lr"]]
    return out.rename(columns={**HUMAN, "acc_mean": "accuracy mean", "acc_std": "sd", "acc_min": "min",
                               "acc_max": "max", "value_mean": "@value mean (learned seeds)", "value_std": "@value sd",
                               "learned": "learned seeds"})


def artefact_table(best: pd.DataFrame) -> pd.DataFrame:
    """Per best-lr run: accuracy (Wilson interval, n) on all / outside / inside examples."""
    rows = []
    for _, r in best.iterrows():
        path = Path(r["run_dir"]) / "accuracy.parquet"
        if not path.exists():
            continue
        acc = read_table(path, ACCURACY_COLUMNS).set_index("subset")
        row = {"arch": r["arch"], "seed": r["seed"]}
        for subset in ("all", "outside", "inside"):
            if subset in acc.index and acc.at[subset, "n"] > 0:
                a = acc.loc[subset]
                row[subset] = f"{a['acc']:.2f} [{a['acc_lo']:.2f}, {a['acc_hi']:.2f}] (n={int(a['n'])})"
            else:
                row[subset] = "–"
        rows.append(row)
    return pd.DataFrame(rows)


def like_for_like_table(best: pd.DataFrame, reference: str = "attention") -> pd.DataFrame:
    """Each best-lr architecture against `reference` on the same examples (`report.paired`), per seed pair:
    accuracy of both on all examples and on those outside both conv reaches, the difference with its 95%
    paired interval. Empty where the reference was not run or the runs lack examples.parquet."""
    ref = best[best["arch"] == reference]
    rows = []
    for arch, part in best[best["arch"] != reference].groupby("arch", sort=False):
        for a, b in seed_pairs(part, ref):
            table = paired_runs(a["run_dir"], b["run_dir"])
            if table is None:
                continue
            for _, r in table.iterrows():
                rows.append({"arch": arch, "vs": reference, "seeds": f"{a.get('seed', 0)} / {b.get('seed', 0)}",
                             "examples": r["subset"], "n": r["n"], "acc": r["acc_a"], f"acc {reference}": r["acc_b"],
                             "difference [95% CI]": f"{r['diff']:+.2f} [{r['diff_lo']:+.2f}, {r['diff_hi']:+.2f}]"})
    return pd.DataFrame(rows)


def conv_evidence_by_run(best: pd.DataFrame) -> dict[str, dict]:
    """run_dir -> `findings.conv_evidence`, for the best-lr runs whose conv-window analysis ran."""
    runs = [d for d in best["run_dir"] if isinstance(d, str)] if "run_dir" in best else []
    return {d: e for d in runs if (e := conv_evidence(d)) is not None}


FORMATION_NOTE = ("Runs with a short conv: the conv output cell (layer, offset from the queried key) whose clean value "
                  "restores most of the answer (sufficiency, 95% bootstrap interval), and the accuracy with that "
                  "layer's conv taps of lag >= 1 zeroed (every position then sees only itself).")


def formation_table(best: pd.DataFrame, evidence: dict[str, dict]) -> pd.DataFrame:
    """Per best-lr run with a conv-window analysis (`evidence`, from `conv_evidence_by_run`): the cell that
    restores most and the tap ablation; the width `d` where the runs span several (the binding layer may move)."""
    widths = "model.d_model" in best and best["model.d_model"].nunique() > 1
    rows = []
    for _, r in best.iterrows():
        e = evidence.get(r.get("run_dir"))
        if e is None:
            continue
        noise = r.get("verdict") == "not learned"  # the best cell of a model that did not learn is noise
        rows.append({"arch": r["arch"], **({"d": int(r["model.d_model"])} if widths else {}), "seed": r["seed"],
                     "verdict": r.get("verdict"),
                     "cell": "–" if noise else f"conv_out L{e['layer']} key+{e['offset']}",
                     "restores": "–" if noise else f"{e['attrib']:.2f} [{e['lo']:.2f}, {e['hi']:.2f}]",
                     "acc": f"{e['acc']:.2f}", "acc, taps of that layer zeroed": "–" if noise else f"{e['cut_acc']:.2f} (n={e['cut_n']})"})
    return pd.DataFrame(rows)


def state_table(best: pd.DataFrame) -> pd.DataFrame:
    """Per best-lr run that learned the task, with a state readout (state_curve.parquet), and per layer: where
    the association enters the state, how much it restores there, and how much the state carries when the
    answer is read."""
    rows = []
    for _, r in best.iterrows():
        path = Path(str(r.get("run_dir"))) / "state_curve.parquet"
        if not path.exists() or r.get("verdict") == "not learned":  # nothing to restore: attributions are noise
            continue
        for _, s in state_summary(read_table(path, STATE_COLUMNS)).iterrows():
            rows.append({"arch": r["arch"], "seed": r["seed"], "mechanism": r.get("verdict"), "layer": int(s["layer"]),
                         "enters at": f"key+{int(s['enters'])}", "most restored": with_interval(s["peak"], s["peak_lo"], s["peak_hi"]),
                         "before the answer": with_interval(s["last"], s["last_lo"], s["last_hi"]), "n": int(s["last_n"])})
    return pd.DataFrame(rows)


def _fmt(df: pd.DataFrame) -> pd.DataFrame:
    return df.map(lambda v: f"{v:.3g}" if isinstance(v, float) and v == v else ("" if v is None or v != v else v))


def _published_medians(df: pd.DataFrame) -> dict[tuple[str, str], float]:
    """(arch, position) -> the study's median attribution, where the runs are of one task and grammar."""
    grammars = df[GRAMMAR].dropna().unique() if GRAMMAR in df else []
    if df["task.name"].nunique() != 1 or len(grammars) > 1:
        return {}
    task, grammar = df["task.name"].iloc[0], grammars[0] if len(grammars) else None
    medians = {(a, pos): published_attribution(task, grammar, a, pos) for a in df["arch"].unique() for pos in figures.POSITIONS}
    return {k: v for k, v in medians.items() if v is not None}


def _figures(study_dir: Path, df: pd.DataFrame, summary: pd.DataFrame, best: pd.DataFrame,
             timelines: dict, widths: pd.DataFrame | None) -> dict[str, tuple[bytes, str]]:
    """name -> (PNG, caption): the study's figures (accuracy against width where `widths`, `width_table`'s,
    is given), then per architecture (its most accurate best-lr run)
    the layer profile, the conv window, the state readout, the timeline and the heatmaps `mecheval
    intervene` drew."""
    palette = figures.colours(list(dict.fromkeys(summary["arch"])))
    out = {"accuracy": (figures.to_png(figures.accuracy_figure(accuracy_bars(summary), palette)), CAPTIONS["accuracy"])}
    if widths is not None:
        out["accuracy_by_width"] = (figures.optimise_png(figures.to_png(width_figure(widths, palette))),
                                    CAPTIONS["accuracy_by_width"])
    if summary["attrib@value"].notna().any():
        with_verdict = df[df["verdict"].notna()]
        out["attribution_scatter"] = (figures.to_png(figures.scatter_figure(with_verdict, palette)),
                                      CAPTIONS["attribution_scatter"])
        if (with_verdict["verdict"] != "not learned").any():
            out["attribution_boxes"] = (figures.to_png(figures.boxes_figure(with_verdict, palette, _published_medians(with_verdict))),
                                        CAPTIONS["attribution_boxes"])
    if timelines:
        out["timeline overlay"] = (figures.to_png(overlay_figure(best, timelines, palette)), CAPTIONS["timeline_overlay"])
    for _, row in best.sort_values("acc", ascending=False).drop_duplicates("arch").iterrows():
        shown = Path(row["run_dir"]) / "interventions"
        if row.get("run_dir") in timelines:
            fig = run_figure(timelines[row["run_dir"]][0], f"{row['arch']} (seed {row['seed']})")
            out[f"timeline {row['arch']}"] = (figures.to_png(fig), CAPTIONS["timeline"].format(arch=row["arch"]))
        for kind, file in (("profile", "key_profile.png"), ("conv_window", "conv_window.png"), ("state", "state_curve.png")):
            if (shown / file).exists():
                out[f"{kind} {row['arch']}"] = ((shown / file).read_bytes(), CAPTIONS[kind].format(arch=row["arch"]))
        # the residual stream first, then the sites inside the mixers (conv_out, core_out, ...)
        paths = sorted((p for p in shown.glob(HEATMAPS) if p.stem != "key_profile"),
                       key=lambda p: (p.name != RESID_HEATMAP, p.name))
        for path in paths:
            site = path.stem.removeprefix("key_")
            name = f"heatmap {row['arch']}" + ("" if path.name == RESID_HEATMAP else f" {site}")
            out[name] = (path.read_bytes(), CAPTIONS["heatmap"].format(arch=row["arch"], site=site))
    return out


def _example(study_dir: Path, best: pd.DataFrame) -> tuple[bytes, str] | None:
    """The annotated heatmap of "how to read this": the most accurate learned run with interventions."""
    learned = best[best["verdict"].notna() & (best["verdict"] != "not learned")]
    for _, row in learned.sort_values("acc", ascending=False).iterrows():
        path = Path(row["run_dir"]) / "interventions.parquet"
        if path.exists():
            fig = figures.howto_figure(pd.read_parquet(path), row["arch"])
            return figures.to_png(fig), (f"{row['arch']} (seed {row['seed']}): every cell is one patch; the red row "
                                         "is the block input the verdict reads, and its brightest cell decides it.")
    return None


def _formed(best: pd.DataFrame, evidence: dict[str, dict]) -> dict[str, dict]:
    """arch -> conv evidence of its most accurate best-lr run that has one."""
    out = {}
    for _, r in best.sort_values("acc", ascending=False).iterrows():
        if r.get("run_dir") in evidence:
            out.setdefault(r["arch"], evidence[r["run_dir"]])
    return out


def study_findings(study_dir: str | Path, seeds: list[int] | None = None, table: pd.DataFrame | None = None) -> dict[str, Outcome]:
    """finding id -> its outcome on the study's best-learning-rate runs (of `seeds` only where given), for the
    findings the study checks; `table`: the study's `study_table`, where the caller has read it already."""
    study_dir = Path(study_dir)
    best = best_runs(study_table(study_dir) if table is None else table, seeds)
    return {f: FINDINGS[f].check(best) for f in study_meta(study_dir).get("findings", [])}


def best_runs(table: pd.DataFrame, seeds: list[int] | None = None) -> pd.DataFrame:
    """The rows of a `study_table` at each architecture's best learning rate, of `seeds` only where given."""
    return table[table["best_lr"] & (table["seed"].isin(seeds) if seeds is not None else True)]


def wall_time_line(meta: dict) -> str:
    """`Wall time: M min.`, with what the cpu scale drops from the published design where the study says;
    empty where study.json records no time."""
    if not meta.get("wall_time_s"):
        return ""
    drops = f" At the cpu scale this study drops {meta['cpu_drops']}." if meta.get("cpu_drops") and meta.get("scale") != "paper" else ""
    return f"Wall time: {meta['wall_time_s'] / 60:.1f} min.{drops}"


def describe(meta: dict, archs: list[str]) -> str:
    """The report's line under its title: the study's description where it ran the preset's architectures,
    else (restricted by --archs, or a folder of runs) the architectures actually in it."""
    if meta.get("description") and not meta.get("archs"):
        return meta["description"]
    ran = f"Architectures: {' vs '.join(archs)}."
    return f"{meta['preset']} restricted to the architectures run. {ran}" if "preset" in meta else ran


def build_report(study_dir: str | Path) -> Report:
    """The report of the study (or sweep) in `study_dir`, from its files alone: no plug-in is imported
    (`plugins.reading_results`), and the study's and its runs' locks are held shared while it reads and
    writes, so that no `intervene` or training writes under it meanwhile (LockedError: busy)."""
    study_dir = Path(study_dir)
    with contextlib.ExitStack() as held:
        held.enter_context(reading_results())
        held.enter_context(DirLock(study_dir, "study directory", shared=True))
        for run_dir in sorted(p for p in runs_dir(study_dir).glob("*") if p.is_dir()):
            held.enter_context(DirLock(run_dir, "run directory", shared=True))
        return _build(study_dir)


def study_meta(study_dir: Path) -> dict:
    """study.json (an object: its strings strings, `findings` a list of known findings, `n_examples` an int,
    where present); {} where absent; ConfigError naming the file otherwise. Every reader of study.json reads it here."""
    path = study_dir / STUDY_JSON
    if not path.exists():
        return {}
    meta = read_json_object(path, {}, optional={**{k: str for k in ("description", "preset", "scale", "cpu_drops")},
                                                "wall_time_s": (int, float), "findings": list, "n_examples": int,
                                                "archs": (list, type(None))})
    unknown = [f for f in meta.get("findings", []) if not isinstance(f, str) or f not in FINDINGS]
    if unknown:
        raise ConfigError(f"{path}: unknown findings {unknown}; known: {', '.join(FINDINGS)}")
    return meta


def _build(study_dir: Path) -> Report:
    meta = study_meta(study_dir)
    df = study_table(study_dir)
    summary = summarise(df)
    best = df[df["best_lr"]]
    archs = list(dict.fromkeys(df["arch"]))
    applicable = [f for f in meta.get("findings", []) if FINDINGS[f].applies(archs)]
    findings = [(claim, o) for _, claim, o in checked(applicable, best)]
    left_out = len(meta.get("findings", [])) - len(applicable)
    evidence = conv_evidence_by_run(best)
    formed_by_arch = _formed(best, evidence)
    timelines = formation_steps(best)
    if timelines:  # per row, the step each seed's final mechanism formed at (`–`: never, or not learned)
        steps = {d: ("–" if s is None else str(s)) for d, (_, s) in timelines.items()}
        by_arch = best.groupby("arch", sort=False)["run_dir"].agg(lambda ds: ", ".join(steps[d] for d in ds if d in steps))
        summary["formed_at"] = summary["arch"].map(by_arch).fillna("")
    overview = overview_text(summary, formed_by_arch, [(c, o.status) for c, o in findings])
    glance = overview_table(summary, formed_by_arch)
    atomic_write_text(study_dir / "summary.csv", summary.to_csv(index=False), study_dir)
    seeds = seeds_table(df)

    widths = width_table(summary, df) if spans_widths(summary) else None

    fig_dir = safe_mkdir(study_dir / "figures", study_dir)
    pngs = _figures(study_dir, df, summary, best, timelines, widths)
    example = _example(study_dir, best)
    files = {}
    for name, (data, _) in pngs.items():
        files[name] = fig_dir / f"{name.replace(' ', '_').replace('(', '').replace(')', '')}.png"
        atomic_write_bytes(files[name], data, study_dir)
    written = set(files.values())
    if example is not None:
        atomic_write_bytes(fig_dir / "how_to_read.png", example[0], study_dir)
        written.add(fig_dir / "how_to_read.png")
    for stale in set(fig_dir.glob("*.png")) - written:  # drawn by an earlier build, not by this one
        safe_unlink(stale, study_dir)

    findings_df = pd.DataFrame([finding_row(c, o) for c, o in findings])
    title = (f"mecheval study: {meta['preset']}" if "preset" in meta else f"mecheval runs: {study_dir.name}") + (
        f" ({meta['scale']} scale)" if "scale" in meta else "")
    meta = {**meta, "description": describe(meta, archs)}
    sections = [
        Section("Findings", "The published findings this study tests, checked on the best-learning-rate runs "
                "(every seed), on the examples outside the conv reach; a claim about accuracy and mechanism is "
                "judged in both parts, an ATR claim per grammar; seeds: how many seeds' runs reproduce it." + (
                    f" {left_out} finding(s) about architectures not in this study are left out." if left_out else ""),
                findings_df),
        Section("Accuracy and mechanism", "Best learning rate per architecture and width (final step). Test "
                "accuracy is the final evaluation; accuracy outside the conv reach is on the intervention examples "
                "whose queried pair the answer cannot reach through short convs alone (the artefact control), with "
                "a 95% interval (the multi-bootstrap over seeds and examples where several seeds ran, else Wilson). "
                "Mechanism and attributions (key corrupted, clean residual patched in at the read point, 95% "
                "interval) are read on those examples; "
                "– where a run did not learn the task. Published figures are for the published task and sizes.",
                for_people(summary), _fmt(summary)),
        *([Section("Accuracy against width", WIDTHS_NOTE, readable_widths(widths), widths)] if widths is not None else []),
        Section("Accuracy and the conv-reach artefact", "Accuracy of each best-lr run on all intervention "
                "examples, on those outside the query's reach through short convs, and inside it (AR: the queried "
                "pair among the last ones), with Wilson 95% intervals and example counts.", artefact_table(best)),
    ]
    fit = fit_table(best)
    if not fit.empty:
        sections.append(Section("Fit to the training set", FIT_NOTE, fit))
    paired = like_for_like_table(best)
    if not paired.empty:
        sections.append(Section("Like for like", "Each architecture beside attention on the same intervention "
                                "examples: all of them, and those outside both models' conv reach (neither side "
                                "read where the other skips), with the paired difference in accuracy and its 95% "
                                "bootstrap interval.", paired))
    formed = formation_table(best, evidence)
    if not formed.empty:
        sections.append(Section("Where the association is formed", FORMATION_NOTE, formed))
    over_training = timeline_table(best, timelines)
    if not over_training.empty:
        sections.append(Section("When the mechanism formed", "Runs trained with snapshots: the readouts above at "
                                "every kept step (`timeline.parquet`), on the same examples. Formed at: the first "
                                "kept step from which the verdict stays the final one.", over_training))
    states = state_table(best)
    if not states.empty:
        sections.append(Section("What the recurrent state carries", "Runs with a recurrent state (`layers.{i}.state`, "
                                "the state after a position): the clean state patched into the key-corrupted run "
                                "after key + o; where the restored share first reaches half its most (enters at), "
                                "that most, and the share restored by the state just before the answer is read "
                                "(95% bootstrap intervals; n examples outside the conv reach).", states))
    if seeds is not None:
        sections.append(Section("Seeds", "Accuracy over seeds, and attrib@value over the seeds that learned the task.",
                                _fmt(seeds)))
    runs_cols = ["name", "arch", "model.d_model", "optim.lr", "seed", "status", "acc", "acc_heldout", "verdict"]
    sections.append(Section("All runs", "One row per run; every config field and metric is in runs.parquet and "
                            "the full summary in summary.csv.", _fmt(df[[c for c in runs_cols if c in df]]).rename(columns=HUMAN)))

    md = [f"# {title}", "", meta.get("description", ""), ""]
    if wall_time_line(meta):
        md += [wall_time_line(meta), ""]
    md += ["## Summary", "", overview, "", glance.to_markdown(index=False), "", "## How to read this", "", HOW_TO_READ, ""]
    if example is not None:
        md += ["![how to read](figures/how_to_read.png)", "", example[1], ""]
    for sec in sections:
        md += [f"## {sec.head}", "", sec.note, "", _fmt(sec.table).to_markdown(index=False) if len(sec.table) else "(none)", ""]
    md += ["## Figures", ""] + [f"![{n}](figures/{p.name})\n\n{pngs[n][1]}\n" for n, p in files.items()]
    markdown = study_dir / "report.md"
    atomic_write_text(markdown, "\n".join(md) + "\n", study_dir)

    images = {n: (base64.b64encode(d).decode(), c) for n, (d, c) in pngs.items()}
    example_b64 = None if example is None else (base64.b64encode(example[0]).decode(), example[1])
    html = study_dir / "report.html"
    atomic_write_text(html, render_html(title, {**meta, "wall_time_line": wall_time_line(meta)}, overview, glance,
                                        HOW_TO_READ, example_b64,
                                        [Section(x.head, x.note, _fmt(x.table), x.raw) for x in sections], images),
                      study_dir)
    return Report(markdown, html, summary, overview, findings)
