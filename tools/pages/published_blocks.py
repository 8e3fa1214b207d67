"""The `published`, `measured` and `figure` blocks: the published tables, a study's stated time, and the
study figure (each published value beside ours)."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pandas as pd

from mecheval.report import published
from mecheval.report.analyse import study_meta
from pages.base import FIGURE_DIR, PageError, args_text, markdown_table, num, runs_table, studies

FIGURE_DATA = FIGURE_DIR / "study.csv"  # the study figure's numbers: checked like a page
FIGURE_PNGS = FIGURE_DIR / "study"  # the study figure, one PNG per (task, scale): `study_figure.figure_name`


def figure_tables(root: Path) -> dict[Path, pd.DataFrame]:
    """The study figure's studies (those with a study.json) -> their `runs_table`."""
    return {study: runs_table(str(root / study)) for study in studies(root) if study_meta(root / study)}


def _by_width(table: dict, label: str) -> list[dict]:
    return [{label: k, **{f"d = {w}": num(v.get(w)) for w, v in [(w, vals) for w in published.WIDTHS]}}
            for k, vals in table.items()]


def published_block(args: dict[str, str], page: Path) -> str:
    name = args.get("table")
    if name == "ar":
        return markdown_table(_by_width(published.AR_ACCURACY, "architecture"))
    if name == "mamba_conv":
        return markdown_table(_by_width(published.MAMBA_AR_BY_CONV, "Mamba d_conv"))
    if name == "based_conv":
        return markdown_table(_by_width(published.BASED_AR_BY_CONV, "Based layer-0 conv"))
    if name == "heldout":
        return markdown_table(_by_width(published.ATR_HELDOUT, "architecture"))
    if name == "atr":
        return "\n\n".join(f"**{grammar}**\n\n" + markdown_table(_by_width(table, "architecture"))
                           for grammar, table in published.ATR_ACCURACY.items())
    if name == "attribution":
        rows = [{"task": "AR", "architecture": a, "verdict": published.AR_VERDICT.get(a.split(" (")[0], "–"),
                 **{f"@{r}": num(v[r]) for r in published.ROLES}} for a, v in published.AR_ATTRIBUTION.items()]
        medians = published.ATR_ATTRIB_MEDIANS
        archs = [a for a in published.ATR_ACCURACY["easy"] if any(a in medians.get(r, {}) for r in published.ROLES)]
        rows += [{"task": f"ATR {g}", "architecture": a, "verdict": published.ATR_VERDICT.get(a, "–"),
                  **{f"@{r}": num(medians.get(r, {}).get(a, {}).get(g)) for r in published.ROLES}}
                 for g in published.ATR_ACCURACY for a in archs]
        return markdown_table(rows)
    raise PageError(f"{page}: generated block 'published {args_text(args)}': table= one of ar, mamba_conv, "
                    "based_conv, atr, heldout, attribution")


def measured_block(args: dict[str, str], page: Path) -> str:
    """The time a named study's cpu scale took, as its preset states it (`Study.cpu_measured`: the one place a
    study's time is stated; `mecheval study --list` prints it too)."""
    from mecheval.study.presets import STUDIES

    if args.get("study") not in STUDIES:
        raise PageError(f"{page}: generated block 'measured {args_text(args)}': study= one of {', '.join(STUDIES)}")
    return f"`mecheval study {args['study']}` took {STUDIES[args['study']].cpu_measured}."


def figure_block(root: Path, args: dict[str, str], page: Path) -> str:
    """The study figure's panels for the scales matching `scale=` (a glob; all where absent), one image per
    (task, scale), each under a line naming it."""
    from pages.study_figure import figure_data, figure_name, groups

    shown = [(t, s) for t, s in groups(figure_data(figure_tables(root))) if fnmatch.fnmatchcase(s, args.get("scale", "*"))]
    if not shown:
        raise PageError(f"{page}: generated block 'figure {args_text(args)}': no committed study of that scale")
    return "\n\n".join(
        f"![{t.upper()} at {s}: the published values beside ours, accuracy and @key / @value / @query per architecture]"
        f"({os.path.relpath(FIGURE_PNGS / figure_name(t, s), page.parent).replace(os.sep, '/')})" for t, s in shown)
