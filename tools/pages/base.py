"""What every generated block reads: the pages and their block specs, the committed studies and their run
tables, the studies a block's arguments select, and the Markdown that shows numbers and links."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from pathlib import Path

import pandas as pd

from mecheval.report.analyse import best_runs, study_meta
from mecheval.report.decide import NOT_RUN
from mecheval.report.findings import checked, finding_row
from mecheval.report.results import study_table
from mecheval.store import studies as store_studies
from mecheval.sweeps.runner import RUNS
from pages.markup import md_text, slug
from pages.rates import other_build

BLOCK = re.compile(r"(<!-- generated: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)
RESULTS = "results"
EARLIER_RULES = "†"  # marks a verdict.json decided by rules older than the current ones
EARLIER_NOTE = ("decided by earlier rules (point estimates, not intervals); `mecheval relabel STUDY_DIR` decides "
                "a study's verdicts anew from its committed tables.")
FIGURE_DIR = Path("docs/figures")
PUBLISHED_SCALES = "paper-d*"  # the scales of the published design (its widths); the findings block reads these


class PageError(ValueError):
    """A generated block the generator cannot fill: the page and the block are named."""


def pages(root: Path) -> list[Path]:
    """README.md and every markdown page under docs/ (paths relative to `root`)."""
    found = [Path("README.md")] if (root / "README.md").exists() else []
    return found + sorted(p.relative_to(root) for p in (root / "docs").rglob("*.md"))


def block_specs(root: Path, kind: str) -> list[tuple[Path, dict[str, str]]]:
    """(page, arguments) of every `kind` block of the pages, in page order."""
    found = []
    for page in pages(root):
        for m in BLOCK.finditer((root / page).read_text()):
            spec_kind, args = parse_spec(m["spec"], page)
            if spec_kind == kind:
                found.append((page, args))
    return found


def studies(root: Path) -> list[Path]:
    """Every study directory under results/ (relative to `root`): a directory holding runs/, at
    results/SCALE/NAME, SCALE naming where it ran (`cpu`, `paper-d64`); a study that has not ended
    (`store.studies.running`: its finished runs committed so that none is lost) is left out until it ends."""
    return sorted(p.relative_to(root) for p in (root / RESULTS).glob("*/*")
                  if (p / RUNS).is_dir() and not store_studies.running(p))


@functools.lru_cache(maxsize=None)
def runs_table(path: str) -> pd.DataFrame:
    """The study's `study_table` of every run under its runs/, whether its latest sweep.yaml names it or not."""
    return study_table(path, every_run=True)


def _task(study: Path) -> str:
    return str(runs_table(str(study))["task.name"].iloc[0])


def _draw(study: Path) -> str:
    """The ATR grammar draw the study's runs trained on (`ATRParams.grammar_draw`; `mecheval` where not set)."""
    draw = runs_table(str(study)).get("task.params.grammar_draw", pd.Series(dtype=object)).dropna()
    return str(draw.iloc[0]) if len(draw) else "mecheval"


def _build(study: Path) -> str:
    """`study` where the study's runs are built as the study's code builds them and their presets' runs are not
    (`mecheval study --build study` for attention: `rates.other_build`), else `default`."""
    return "study" if other_build(runs_table(str(study))).any() else "default"


def parse_spec(text: str, page: Path) -> tuple[str, dict[str, str]]:
    kind, *args = text.split()
    try:
        return kind, dict(a.split("=", 1) for a in args)
    except ValueError:
        raise PageError(f"{page}: generated block '{text}': arguments are key=value") from None


def num(v, digits: int = 2) -> str:
    return "–" if v is None or v != v else f"{float(v):.{digits}f}"


def interval(row: pd.Series, col: str) -> str:
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    if lo is None or lo != lo:
        return num(row.get(col))
    return f"{num(row[col])} [{num(lo)}, {num(hi)}]"


def markdown_table(rows: list[dict]) -> str:
    if not rows:
        return "(none)"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]).replace("|", "\\|") for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def study_link(root: Path, page: Path, study: Path, index: dict[Path, Path]) -> str:
    """A relative link from `page` to the section of the page whose `studies` block shows `study`."""
    target = index.get(study)
    if target is None:
        return f"`{study}`"
    rel = os.path.relpath(target, page.parent).replace(os.sep, "/")
    return f"[{md_text(f'{study.parent.name}/{study.name}')}]({rel}#{anchor(study)})"


def anchor(study: Path) -> str:
    return slug(f"{study.parent.name}-{study.name}")


def seeds_text(df: pd.DataFrame) -> str:
    seeds = sorted(int(s) for s in df["seed"].dropna().unique())
    return f"{len(seeds)} ({', '.join(map(str, seeds))})"


def examples_text(df: pd.DataFrame) -> str:
    """The intervention examples per run behind the verdicts (a range where runs differ)."""
    ns = sorted({int(n) for n in df.get("n_all", pd.Series(dtype=float)).dropna()})
    return "–" if not ns else str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"


def findings_checked(fids: list[str], table: pd.DataFrame) -> list[dict]:
    """The findings `fids` checked on the best-learning-rate rows of `table` (a study's, or a pool's), one row
    each (and per ATR grammar: `findings.checked`; claim, outcome, parts, seeds, evidence: `findings.finding_row`),
    leaving out those whose architectures have not run."""
    return [finding_row(claim, o) for _, claim, o in checked(fids, best_runs(table)) if o.status != NOT_RUN]


def chosen_studies(root: Path, kind: str, args: dict[str, str], page: Path) -> list[Path]:
    """The studies a `kind` block's arguments select (`matches`); PageError where none does."""
    chosen = [s for s in studies(root) if matches(root, s, args)]
    if not chosen:
        raise PageError(f"{page}: generated block '{kind} {args_text(args)}': no study under results/ matches")
    return chosen


def matches(root: Path, study: Path, args: dict[str, str]) -> bool:
    if "study" in args:  # one study, or several: study=results/cpu/a,results/cpu/b
        return study in map(Path, args["study"].split(","))
    return (fnmatch.fnmatchcase(study.parent.name, args.get("scale", "*"))
            and args.get("task", _task(root / study)) == _task(root / study)
            and ("preset" not in args or study_meta(root / study).get("preset") in args["preset"].split(","))
            and ("draw" not in args or _draw(root / study) in args["draw"].split(","))
            and ("build" not in args or _build(root / study) in args["build"].split(",")))


def args_text(args: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in args.items())
