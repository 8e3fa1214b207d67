"""The `findings`, `checks` and `rounding` blocks: the published findings, read on the committed studies
and pools."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pandas as pd

from mecheval.interventions.runs import verdict_is_current
from mecheval.report.analyse import best_runs, study_findings, study_meta
from mecheval.report.decide import INCONCLUSIVE, NOT_REPRODUCED, NOT_RUN, REPRODUCED
from mecheval.report.findings import ACCURACY, FINDINGS, MECHANISM, Finding, Outcome, checked, conv_evidence
from mecheval.sweeps.runner import RUNS
from pages.base import (EARLIER_NOTE, EARLIER_RULES, PUBLISHED_SCALES, RESULTS, PageError, args_text, block_specs,
                        examples_text, markdown_table, runs_table, seeds_text, studies, study_link)
from pages.markup import md_text
from pages.pool_blocks import POOL_ANCHOR, block_pool, pool_findings, pool_name


def findings_rows(root: Path, page: Path, index: dict[Path, Path], scale: str = "*", name: str = "*") -> list[dict]:
    """One row per check of a published finding (in `FINDINGS` order) by a committed study of a scale matching
    `scale` and a name matching `name` (globs: `cpu`, `paper-d*`; `quick-main*`): per study that checks it, on its
    best-learning-rate runs as its report reads them, then per pooled block of the pages holding such a study (its
    studies read as one, every seed at the pool's best rate): our outcome, the seeds, the intervention examples per
    run, the scale and a link."""
    checks: list[tuple[int, str, int, dict]] = []  # (the finding's place in FINDINGS, claim, order of the check, row)

    def check(fids: list[str], best: pd.DataFrame, scale: str, link: str) -> None:
        stale = any(not verdict_is_current(Path(d)) for d in best["run_dir"] if (Path(d) / "verdict.json").exists())
        for fid, claim, outcome in checked(fids, best):
            if outcome.status != NOT_RUN:
                checks.append((list(FINDINGS).index(fid), claim, len(checks), {
                    "published finding": claim, "ours": _ours(outcome) + (f" {EARLIER_RULES}" if stale else ""),
                    "seeds": seeds_text(best), "examples": examples_text(best), "scale": scale, "study": link}))

    for study in studies(root):
        meta = study_meta(root / study)
        if meta.get("findings") and _named(study, scale, name):
            df = runs_table(str(root / study))
            check(meta["findings"], best_runs(df), md_text(study.parent.name), study_link(root, page, study, index))
    for pool_page, args in block_specs(root, "pooled"):  # the pages' pools: several studies' seeds read as one
        chosen, df = block_pool(root, args, pool_page)
        if not any(_named(s, scale, name) for s in chosen):
            continue
        name = pool_name(args, pool_page)
        rel = os.path.relpath(pool_page, page.parent).replace(os.sep, "/")
        scales = ", ".join(sorted({s.parent.name for s in chosen}))
        check(pool_findings(root, chosen), best_runs(df), f"{scales} (pooled)", f"[{name}]({rel}#{POOL_ANCHOR}{name})")
    return [row for *_, row in sorted(checks, key=lambda c: c[:3])]


def _named(study: Path, scale: str, name: str) -> bool:
    """Is results/SCALE/NAME of a scale matching `scale` and a name matching `name` (globs)?"""
    return fnmatch.fnmatchcase(study.parent.name, scale) and fnmatch.fnmatchcase(study.name, name)


def headline_rows(root: Path, page: Path, scale: str = PUBLISHED_SCALES) -> list[dict]:
    """One row per published finding a `pooled` block of the pages checks (in `FINDINGS` order) on studies of a
    scale matching `scale` (a glob): its reading on the pool holding the most best-learning-rate runs of the
    claim's architectures (its studies' seeds read as one): the outcome, accuracy and mechanism apart (each the worst over the spans the claim
    is read on, `Finding.part_statuses`), the seeds and learning rates behind it, the examples per run, what does
    not reproduce, in words, and a link to the pool."""
    best: dict[str, tuple[int, pd.DataFrame, pd.DataFrame, str]] = {}  # finding -> (runs, its pool's best rows, all rows, link)
    for pool_page, args in block_specs(root, "pooled"):
        chosen, df = block_pool(root, args, pool_page)
        if not all(fnmatch.fnmatchcase(s.parent.name, scale) for s in chosen):
            continue
        name = pool_name(args, pool_page)
        link = f"[{name}]({os.path.relpath(pool_page, page.parent).replace(os.sep, '/')}#{POOL_ANCHOR}{name})"
        top = best_runs(df)
        for fid in pool_findings(root, chosen):
            runs = int(top["arch"].isin(FINDINGS[fid].archs).sum())
            if runs > best.get(fid, (0,))[0]:
                best[fid] = (runs, top, df, link)
    rows = []
    for fid in (f for f in FINDINGS if f in best):
        _, top, df, link = best[fid]
        finding = FINDINGS[fid]
        outcome, parts = finding.check(top), finding.part_statuses(top)
        mine = top[top["arch"].isin(finding.archs)]
        rows.append({"#": str(len(rows) + 1), "published finding": finding.claim, "ours": f"**{outcome.status}**",
                     "accuracy": parts.get(ACCURACY, "–"), "mechanism": parts.get(MECHANISM, "–"),
                     "seeds": seeds_text(mine), "learning rates": _rates(df[df["arch"].isin(finding.archs)]),
                     "examples per run": examples_text(mine), "what does not reproduce": _failing(finding, top), "pool": link})
    return rows


def _rates(df: pd.DataFrame) -> str:
    """The learning rates tried, `1e-3, 3e-3, 1e-2`; the best per cell is read."""
    return ", ".join(f"{lr:.0e}".replace("e-0", "e-") for lr in sorted(df["optim.lr"].dropna().unique())) or "–"


def _failing(finding: Finding, best: pd.DataFrame) -> str:
    """Each span (grammar, width) where `finding` does not reproduce, with the parts that fail: `at d = 128:
    accuracy not reproduced`; `–` where every span reproduces."""
    words = []
    for span, o in finding.check_each(best).items():
        if o.status in (NOT_RUN, REPRODUCED):
            continue
        failing = [f"{part} {status}" for part, status in (o.parts or {finding.part: o.status}).items() if status != REPRODUCED]
        words.append(f"{span}: {', '.join(failing)}" if span else ", ".join(failing))
    return "; ".join(words) or "–"


def headline_summary(rows: list[dict], scale: str = PUBLISHED_SCALES) -> str:
    """One sentence over `headline_rows` of `scale`: how many findings reproduce, how many do not (their rows) and
    how many the data leave undecided."""
    status = [r["ours"].strip("*") for r in rows]
    failing = [r["#"] for r, s in zip(rows, status) if s == NOT_REPRODUCED]
    named = f" (rows {', '.join(failing)})" if failing else ""
    where = "published-scale" if scale == PUBLISHED_SCALES else f"`{scale}`"
    return (f"Of the {len(rows)} published findings our {where} runs check, {status.count(REPRODUCED)} reproduce, "
            f"{status.count(NOT_REPRODUCED)} do not{named}, and the data leave {status.count(INCONCLUSIVE)} inconclusive.")


def _ours(o: Outcome) -> str:
    """A finding's outcome for the findings table: bold, with its parts and the share of seeds reproducing it."""
    detail = "; ".join(filter(None, (o.parts_words(), o.seed_share())))
    return f"**{o.status}**" + (f" ({detail})" if detail else "")


def rounding_rows(root: Path, args: dict[str, str], page: Path) -> list[dict]:
    """One row per study listed in `studies=a,b` (results/SCALE/NAME without `results/`): the outcome of each
    finding the first study checks, on its best-learning-rate runs of `seed` (all seeds where absent), and
    Mamba's conv cell (the conv output restoring most) with its interval: the same design trained more
    than once, read side by side."""
    chosen = [Path(RESULTS) / s for s in args.get("studies", "").split(",") if s]
    missing = [str(s) for s in chosen if not (root / s / RUNS).is_dir()]
    if not chosen or missing:
        raise PageError(f"{page}: generated block 'rounding {args_text(args)}': no study {missing or 'listed'} under results/")
    seeds = [int(args["seed"])] if "seed" in args else None
    rows = []
    for study in chosen:
        best = runs_table(str(root / study))
        found = study_findings(root / study, seeds, best)
        mamba = best_runs(best, seeds).query("arch == 'mamba'")
        cells = [e for d in mamba["run_dir"] if (e := conv_evidence(d))]
        rows.append({"study": f"`{study}`", **{f"`{f}`": o.status for f, o in found.items()},
                     "Mamba's conv cell": "; ".join(f"L{e['layer']} key+{e['offset']} {e['attrib']:.2f} [{e['lo']:.2f}, "
                                                    f"{e['hi']:.2f}]" for e in cells) or "–"})
    return rows


def findings_block(root: Path, args: dict[str, str], page: Path, index: dict[Path, Path]) -> str:
    scale = args.get("scale", PUBLISHED_SCALES)
    rows = headline_rows(root, page, scale)
    return headline_summary(rows, scale) + "\n\n" + markdown_table(rows)


def checks_block(root: Path, args: dict[str, str], page: Path, index: dict[Path, Path]) -> str:
    rows = findings_rows(root, page, index, args.get("scale", "*"), args.get("name", "*"))
    body = markdown_table(rows)
    if any(EARLIER_RULES in r["ours"] for r in rows):
        body += f"\n\n{EARLIER_RULES} Some of the verdicts behind the outcome were {EARLIER_NOTE}"
    return body
