"""`build_report(study_dir)` = `render(analyse(load(study_dir)))`: report.md, a self-contained report.html,
summary.csv and figures/ from a study's runs. `analyse` (report/analyse.py) returns the study's tables; `render`
only formats, draws and writes them.

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

from mecheval.common import atomic_write_bytes, atomic_write_text, safe_mkdir, safe_unlink
from mecheval.plugins import reading_results
from mecheval.training.lock import DirLock
from mecheval.sweeps.table import DIVERGED
from mecheval.interventions.verdict import shows_attributions
from mecheval.report import figures
from mecheval.report.analyse import INTERVALS, Tables, analyse, load
from mecheval.report.compare import HELDOUT_ACC_CELL, HELDOUT_VALUE_CELL, heldout_cells, published_attribution
from mecheval.report.decide import RULE
from mecheval.report.html import render_html
from mecheval.report.fit import FIT_NOTE
from mecheval.report.findings import Outcome, finding_row
from mecheval.report.overview import GRAMMAR, by_grammar, overview_table, overview_text, with_interval
from mecheval.report.results import HELDOUT_READ_ACC, HELDOUT_VALUE
from mecheval.sweeps.table import runs_dir
from mecheval.report.timelines import overlay_figure, run_figure
from mecheval.report.widths import readable_widths, width_figure

HEATMAPS = "key_*.png"  # in each run's interventions/, drawn by `mecheval intervene`: corrupt key, one per site
RESID_HEATMAP = "key_resid_pre.png"
RESID = RESID_HEATMAP.removeprefix("key_").removesuffix(".png")  # the residual stream's heatmap: "heatmap <arch>"


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

SEEDS_HUMAN = {  # `seeds_table`'s own columns -> headers for people
    "acc_mean": "accuracy mean", "acc_std": "sd", "acc_min": "min", "acc_max": "max",
    "value_mean": "@value mean (learned seeds)", "value_std": "@value sd", "learned": "learned seeds",
}

CAPTIONS = {  # figure name prefix -> caption (`{arch}` and `{site}` filled in)
    "accuracy": "Accuracy per architecture at its best learning rate, on the examples outside the conv reach "
                "where the runs were intervened on (bars, with 95% multi-bootstrap intervals over seeds, or Wilson "
                "for one run); black ticks: the published accuracy for the published task and size.",
    "accuracy_by_width": "Accuracy against width, at each width's best learning rate: ours as solid lines (markers "
                         "with 95% multi-bootstrap intervals over seeds, or Wilson for one run; the final test "
                         "accuracy, as the published ones were read), the published accuracy as dashed lines in the same colour, on "
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

WIDTHS_NOTE = ("Each width's best-learning-rate final test accuracy (on every test prompt, seen in training or not, as the "
               "published accuracies were read; with its 95% interval: the multi-bootstrap over seeds where several ran, "
               "else Wilson) beside the published one, compared point by point: " + RULE + ".")

FORMATION_NOTE = ("Runs with a short conv: the conv output cell (layer, offset from the queried key) whose clean value "
                  "restores most of the answer (sufficiency, 95% bootstrap interval), and the accuracy with that "
                  "layer's conv taps of lag >= 1 zeroed (every position then sees only itself).")


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
        return render(analyse(load(study_dir)))


def render(tables: Tables) -> Report:
    """Writes the study's report from its tables: summary.csv, the figures, report.md and report.html."""
    study_dir, meta, summary = tables.study.dir, tables.study.meta, tables.summary
    overview = overview_text(summary, tables.formed, [(c, o.status) for c, o in tables.findings])
    glance = overview_table(summary, tables.formed)
    atomic_write_text(study_dir / "summary.csv", summary.to_csv(index=False), study_dir)
    pngs = _figures(study_dir, tables.study.runs, summary, tables.best, tables.timelines, tables.widths)
    example = _example(study_dir, tables.best)
    files = _write_figures(study_dir, pngs, example)
    title = (f"mecheval study: {meta['preset']}" if "preset" in meta else f"mecheval runs: {study_dir.name}") + (
        f" ({meta['scale']} scale)" if "scale" in meta else "")
    meta = {**meta, "description": describe(meta, list(dict.fromkeys(tables.study.runs["arch"])))}
    shown = sections(tables)

    md = [f"# {title}", "", meta.get("description", ""), ""]
    if wall_time_line(meta):
        md += [wall_time_line(meta), ""]
    md += ["## Summary", "", overview, "", glance.to_markdown(index=False), "", "## How to read this", "", HOW_TO_READ, ""]
    if example is not None:
        md += ["![how to read](figures/how_to_read.png)", "", example[1], ""]
    for sec in shown:
        md += [f"## {sec.head}", "", sec.note, "", _fmt(sec.table).to_markdown(index=False) if len(sec.table) else "(none)", ""]
    md += ["## Figures", ""] + [f"![{n}](figures/{p.name})\n\n{pngs[n][1]}\n" for n, p in files.items()]
    markdown = study_dir / "report.md"
    atomic_write_text(markdown, "\n".join(md) + "\n", study_dir)

    images = {n: (base64.b64encode(d).decode(), c) for n, (d, c) in pngs.items()}
    example_b64 = None if example is None else (base64.b64encode(example[0]).decode(), example[1])
    html = study_dir / "report.html"
    atomic_write_text(html, render_html(title, {**meta, "wall_time_line": wall_time_line(meta)}, overview, glance,
                                        HOW_TO_READ, example_b64,
                                        [Section(x.head, x.note, _fmt(x.table), x.raw) for x in shown], images),
                      study_dir)
    return Report(markdown, html, summary, overview, tables.findings)


def sections(tables: Tables) -> list[Section]:
    """The report's sections after its summary, each a table for people (the empty optional ones left out)."""
    df = tables.study.runs
    left_out = tables.left_out
    out = [
        Section("Findings", "The published findings this study tests, checked on the best-learning-rate runs "
                "(every seed), on the examples outside the conv reach; a claim about accuracy and mechanism is "
                "judged in both parts, an ATR claim per grammar; seeds: how many seeds' runs reproduce it." + (
                    f" {left_out} finding(s) about architectures not in this study are left out." if left_out else ""),
                pd.DataFrame([finding_row(c, o) for c, o in tables.findings])),
        Section("Accuracy and mechanism", "Best learning rate per architecture and width (final step). Test "
                "accuracy is the final evaluation; accuracy outside the conv reach is on the intervention examples "
                "whose queried pair the answer cannot reach through short convs alone (the artefact control), with "
                "a 95% interval (the multi-bootstrap over seeds and examples where several seeds ran, else Wilson). "
                "Mechanism and attributions (key corrupted, clean residual patched in at the read point, 95% "
                "interval) are read on those examples; "
                "– where a run did not learn the task. Published figures are for the published task and sizes.",
                for_people(tables.summary), _fmt(tables.summary)),
        *([Section("Accuracy against width", WIDTHS_NOTE, readable_widths(tables.widths), tables.widths)]
          if tables.widths is not None else []),
        Section("Accuracy and the conv-reach artefact", "Accuracy of each best-lr run on all intervention "
                "examples, on those outside the query's reach through short convs, and inside it (AR: the queried "
                "pair among the last ones), with Wilson 95% intervals and example counts.", tables.artefact),
    ]
    if not tables.fit.empty:
        out.append(Section("Fit to the training set", FIT_NOTE, tables.fit))
    if not tables.paired.empty:
        out.append(Section("Like for like", "Each architecture beside attention on the same intervention "
                           "examples: all of them, and those outside both models' conv reach (neither side "
                           "read where the other skips), with the paired difference in accuracy and its 95% "
                           "bootstrap interval.", tables.paired))
    if not tables.formation.empty:
        out.append(Section("Where the association is formed", FORMATION_NOTE, tables.formation))
    if not tables.over_training.empty:
        out.append(Section("When the mechanism formed", "Runs trained with snapshots: the readouts above at "
                           "every kept step (`timeline.parquet`), on the same examples; a step whose accuracy is not above "
                           "chance reads `not learned`, as the current rules read it. Formed at: the first kept step "
                           "from which the verdict stays the final one.", tables.over_training))
    if not tables.states.empty:
        out.append(Section("What the recurrent state carries", "Runs with a recurrent state (`layers.{i}.state`, "
                           "the state after a position): the clean state patched into the key-corrupted run "
                           "after key + o; where the restored share first reaches half its most (enters at), "
                           "the last offset before it first falls under that half (held to), that most, and the "
                           "share restored by the state just before the answer is read (95% bootstrap "
                           "intervals; n examples outside the conv reach).", tables.states))
    if tables.seeds is not None:
        out.append(Section("Seeds", "Accuracy over seeds, and attrib@value over the seeds that learned the task.",
                           _fmt(seeds_for_people(tables.seeds))))
    runs_cols = ["name", "arch", "model.d_model", "optim.lr", "seed", "status", "acc", "acc_heldout", "verdict"]
    runs = df[[c for c in runs_cols if c in df]].copy()
    if "diverged.reason" in df:  # a diverged run has no verdict: why it diverged instead
        runs["verdict"] = runs["verdict"].where(df["status"] != DIVERGED, df["diverged.reason"])
    out.append(Section("All runs", "One row per run; every config field and metric is in runs.parquet and "
                       "the full summary in summary.csv.", _fmt(runs).rename(columns=HUMAN)))
    return out


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


def seeds_for_people(seeds: pd.DataFrame) -> pd.DataFrame:
    """`seeds_table` with human headers and the learning rate as it is written (`1e-3`)."""
    return seeds.assign(**{"optim.lr": [f"{v:g}" for v in seeds["optim.lr"]]}).rename(columns=HUMAN | SEEDS_HUMAN)


def accuracy_bars(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with one bar label per row: `arch · grammar` where the study ran several grammars."""
    return summary.assign(arch=by_grammar(summary["arch"], summary.get(GRAMMAR)))


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
    intervene` drew; none where no run finished."""
    if summary.empty:
        return {}
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
    archs = list(dict.fromkeys(best["arch"]))
    for _, row in best.sort_values("acc", ascending=False).drop_duplicates("arch").iterrows():
        shown = Path(row["run_dir"]) / "interventions"
        if row.get("run_dir") in timelines:
            fig = run_figure(timelines[row["run_dir"]][0], f"{row['arch']} (seed {row['seed']})")
            out[f"timeline {row['arch']}"] = (figures.to_png(fig), CAPTIONS["timeline"].format(arch=row["arch"]))
        kinds, heatmaps = (_committed_readout_figures(study_dir, row["arch"], archs) if not any(shown.glob("*.png"))
                           else ({}, {}))
        for kind, file in (("profile", "key_profile.png"), ("conv_window", "conv_window.png"), ("state", "state_curve.png")):
            data = (shown / file).read_bytes() if (shown / file).exists() else kinds.get(kind)
            if data is not None:
                out[f"{kind} {row['arch']}"] = (data, CAPTIONS[kind].format(arch=row["arch"]))
        # the residual stream first, then the sites inside the mixers (conv_out, core_out, ...)
        paths = sorted((p for p in shown.glob(HEATMAPS) if p.stem != "key_profile"),
                       key=lambda p: (p.name != RESID_HEATMAP, p.name))
        heatmaps = {path.stem.removeprefix("key_"): path.read_bytes() for path in paths} or heatmaps
        for site, data in heatmaps.items():
            name = f"heatmap {row['arch']}" + ("" if site == RESID else f" {site}")
            out[name] = (data, CAPTIONS["heatmap"].format(arch=row["arch"], site=site))
    return out


def figure_file(study_dir: Path, name: str) -> Path:
    """The file of the study's figure `name` ("heatmap mamba (d_conv 0) resid_post" -> figures/heatmap_mamba_d_conv_0_resid_post.png)."""
    return study_dir / "figures" / f"{name.replace(' ', '_').replace('(', '').replace(')', '')}.png"


def _committed_readout_figures(study_dir: Path, arch: str, archs: list[str]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The readout figures of `arch`'s shown run as an earlier build copied them into figures/, for a run directory
    that keeps no PNGs (the commit rule: a figure is committed once): ({kind: PNG} of its profile, conv window and
    state, {site: PNG} of every heatmap: a file `heatmap_<arch>[_<site>].png` not of another architecture whose name
    extends arch's)."""
    stem = figure_file(study_dir, f"heatmap {arch}").stem
    longer = [figure_file(study_dir, f"heatmap {a}").stem for a in archs if a != arch]
    longer = [t for t in longer if t.startswith(stem) and len(t) > len(stem)]
    kinds = {kind: path.read_bytes() for kind in ("profile", "conv_window", "state")
             if (path := figure_file(study_dir, f"{kind} {arch}")).exists()}
    heatmaps = {}
    for path in sorted((study_dir / "figures").glob(f"{stem}*.png")):
        if path.stem != stem and (not path.stem.startswith(stem + "_") or any(path.stem.startswith(t) for t in longer)):
            continue
        heatmaps[path.stem.removeprefix(stem).removeprefix("_") or RESID] = path.read_bytes()
    return kinds, heatmaps


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


def _write_figures(study_dir: Path, pngs: dict[str, tuple[bytes, str]], example: tuple[bytes, str] | None) -> dict[str, Path]:
    """Writes the figures (and the example's) into figures/, removing those an earlier build drew and this one
    did not; name -> its file."""
    fig_dir = safe_mkdir(study_dir / "figures", study_dir)
    files = {}
    for name, (data, _) in pngs.items():
        files[name] = fig_dir / figure_file(study_dir, name).name
        atomic_write_bytes(files[name], data, study_dir)
    written = set(files.values())
    if example is not None:
        atomic_write_bytes(fig_dir / "how_to_read.png", example[0], study_dir)
        written.add(fig_dir / "how_to_read.png")
    for stale in set(fig_dir.glob("*.png")) - written:  # drawn by an earlier build, not by this one
        safe_unlink(stale, study_dir)
    return files


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
