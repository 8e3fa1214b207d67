"""The `pooled` block: several studies read as one (`pooled.py`), with its figures' data and drawing."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pandas as pd

from mecheval.report.analyse import best_runs, conv_evidence_by_run, formation_table, study_meta, summarise
from mecheval.report.build import FORMATION_NOTE
from mecheval.report.decide import RULE
from mecheval.report.widths import spans_widths, width_table
from pages.base import (FIGURE_DIR, PageError, args_text, chosen_studies, findings_checked, markdown_table,
                       )
from pages.pooled import STUDY, attribution_runs, left_out, pooled_summary, pooled_table, published_medians

POOL_DIR = FIGURE_DIR / "pooled"  # per `pooled` block: NAME.csv (the box figure's runs) and NAME-widths.csv, with .png
POOL_FIGURES = {"boxes": "", "widths": "-widths"}  # figure -> its files' suffix after NAME
POOL_ANCHOR = "pooled-"  # a pooled block's anchor on its page: pooled-NAME


def pool_name(args: dict[str, str], page: Path) -> str:
    name = args.get("name", "")
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        raise PageError(f"{page}: generated block 'pooled {args_text(args)}': name=NAME (lower-case letters, digits "
                        "and '-') names its figures")
    return name


@functools.lru_cache(maxsize=None)
def cached_pool(root: Path, chosen: tuple[Path, ...]) -> pd.DataFrame:
    return pooled_table([root / s for s in chosen])


def block_pool(root: Path, args: dict[str, str], page: Path) -> tuple[list[Path], pd.DataFrame]:
    """A pooled block's studies and `pooled.pooled_table` of them; a pool of two designs names the page."""
    chosen = chosen_studies(root, "pooled", args, page)
    try:
        df = cached_pool(root, tuple(chosen))
    except ValueError as e:
        raise PageError(f"{page}: generated block 'pooled {args_text(args)}': {e}") from None
    if "archs" not in args:
        return chosen, df
    df = df[df["arch"].isin(args["archs"].split(","))].reset_index(drop=True)
    if df.empty:
        raise PageError(f"{page}: generated block 'pooled {args_text(args)}': no run of {args['archs']} in the studies matched")
    return [s for s in chosen if str(root / s) in set(df[STUDY])], df


def pool_findings(root: Path, chosen: list[Path]) -> list[str]:
    """The findings the pooled studies check, each once, in the studies' order."""
    return list(dict.fromkeys(f for s in chosen for f in study_meta(root / s).get("findings", [])))


def pool_files(name: str, figure: str) -> tuple[Path, Path]:
    """(CSV, PNG) of a pooled block's figure (`boxes` or `widths`), relative to the repository."""
    stem = POOL_DIR / f"{name}{POOL_FIGURES[figure]}"
    return stem.with_suffix(".csv"), stem.with_suffix(".png")


def pool_data(root: Path, args: dict[str, str], page: Path) -> tuple[list[Path], pd.DataFrame, dict[str, pd.DataFrame]]:
    """A pooled block's studies, `pooled.pooled_table` of them, and figure -> its data: `boxes` (the per-run
    attributions, where a learned run was intervened on) and `widths` (`width_table`, where the best runs
    span several widths)."""
    chosen, df = block_pool(root, args, page)
    data = {}
    runs = attribution_runs(df)
    if (runs["verdict"] != "not learned").any():
        data["boxes"] = runs
    summary = summarise(df)
    if spans_widths(summary):
        data["widths"] = width_table(summary, df)
    return chosen, df, data


def pooled_block(root: Path, args: dict[str, str], page: Path) -> str:
    name = pool_name(args, page)
    chosen, df, data = pool_data(root, args, page)
    done = int((df["status"] == "done").sum())
    out = [f'<a id="{POOL_ANCHOR}{name}"></a>', "",
           f"The runs of {', '.join(f'`{s}`' for s in chosen)} read as one study: {done} finished runs (every run "
           "directory under their runs/, whether the latest sweep.yaml names it or not; a run committed in more than "
           "one study counted once), the best learning rate per architecture chosen over all of them. "
           + left_out_line(root, df) + " *acc read*: the accuracy the readouts read (test prompts unseen in training, "
           "outside the conv reach, where intervened on); *test acc*: the final test accuracy on every test prompt, "
           "seen or not, as the published accuracies were read, and the one compared with them; attributions at the "
           "verdict's read point: means over seeds with 95% intervals (the multi-bootstrap over seeds and examples; "
           f"one seed: its own), the published median in brackets. Compared: {RULE}.", "",
           markdown_table(pooled_summary(df).to_dict("records")), ""]
    rows = findings_checked(pool_findings(root, chosen), df)
    if rows:
        out += ["The findings these studies check, on the pooled best-learning-rate runs (every seed):", "",
                markdown_table(rows), ""]
    best = best_runs(df).sort_values("model.d_model", kind="stable")  # `best_lr` marks finished runs only
    formed = formation_table(best, conv_evidence_by_run(best))
    if not formed.empty:  # across widths: the layer that binds key and value may move
        out += ["Where the association is formed, per run. " + FORMATION_NOTE, "",
                markdown_table(formed.astype(str).to_dict("records")), ""]
    captions = {"boxes": "@key / @value / @query per architecture, one point per run (a box from 3 runs), the published "
                         "medians as black ticks",
                "widths": "Accuracy against width, ours solid with 95% intervals, published dashed"}
    for figure in data:
        png = os.path.relpath(pool_files(name, figure)[1], page.parent).replace(os.sep, "/")
        out += [f"![{captions[figure]}]({png})", ""]
    return "\n".join(out)


def left_out_line(root: Path, df: pd.DataFrame) -> str:
    """`Left out: …`, each run the tables do not read in full with its reason (`pooled.left_out`; paths relative
    to the repository), or that every run is read."""
    named = df.assign(**{STUDY: [os.path.relpath(s, root) for s in df[STUDY]]}) if STUDY in df else df
    runs = left_out(named)
    return ("Left out: " + "; ".join(f"`{r}`" for r in runs) + ".") if runs else "No run is left out."


def draw_boxes(runs: pd.DataFrame, path: Path) -> None:
    """`figures.boxes_figure` of `pooled.attribution_runs`' table (read back from its CSV) at `path`."""
    from mecheval.report.figures import boxes_figure, colours
    from pages.study_figure import save_figure

    save_figure(boxes_figure(runs, colours(list(dict.fromkeys(runs["arch"]))), published_medians(runs)), path)
