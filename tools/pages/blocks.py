"""The documentation's numbers about committed runs, generated from `results/` (`make pages`).

A page (README.md, docs/**/*.md) holds generated blocks between two markers:

    <!-- generated: KIND key=value ... -->
    ...                                   (written by `write_pages`; never edited by hand)
    <!-- end generated -->

KINDs:
    findings    one row per published finding, read at the published scale (`scale=GLOB`, paper-d* by default)
                on the pool of the pages (below) holding most of its runs: the outcome, accuracy and
                mechanism apart, seeds, rates, examples, what does not reproduce; a sentence counting them
    checks      every check of every finding by each study of `scale=GLOB` (and `name=GLOB`) and each pool holding
                one, one line each
    measured    the time a named study (`study=NAME`) took, as its preset states it
    studies     every study under results/ whose task and scale match (`task=ar scale=cpu`; `study=DIR`
                for one): what it ran, the findings it checks, one row per run, where the association
                is formed, what the recurrent state carries and when the mechanism formed
    published   a table of `mecheval.report.published` (`table=ar|mamba_conv|based_conv|atr|atr_attribution|heldout`)
    figure      the study figure (`study_figure.py`): each published value beside ours, one image per
                (task, scale) of `scale=GLOB` (every scale by default)
    widths      accuracy against width (`mecheval.report.widths`: the figure and the table compared with the published
                values) of every study matching as `studies` does whose best-learning-rate runs span several
                widths (a `studies` section shows it too)
    pooled      the studies matching (`name=NAME task=… scale=GLOB preset=…`) read as one (`pooled.py`), keeping
                the architectures of `archs=a,b` where given (labels without spaces): per
                architecture, seeds over all of them, accuracy and attributions beside the published values,
                the box figure of @key / @value / @query with the published medians, and accuracy against
                width where the pool spans widths (docs/figures/pooled/NAME.csv and .png, NAME-widths.*)

    rates       every published-scale cell at every learning rate tried (`rates.py`: the figure, from
                docs/figures/rates.csv, and how many cells have their best rate bracketed)
    coverage    the published accuracy cells: how many we compared, with how many rates and seeds, and the
                strict comparisons counted (`rates.coverage_summary`)
    prompts     per scale and task, the share of test prompts seen in training, and accuracy on all prompts
                beside accuracy on the unseen ones the readouts read (verdict.json)
    pointers    every learned run whose query carries part of the effect, with its pointer control
    design      the trial sweeps under `dir=results/SCALE/NAME` (one per subdirectory): per sweep its design
                (architecture, rate, batch, schedule; with `main=results/SCALE/STUDY`, the fields in which it
                differs from the nearest of that study's designs) and each seed's final test accuracy, how many learned
    modern      the studies chosen as `studies` does (`preset=modern scale=cpu`), read as one pool: each
                architecture's accuracy, verdicts' shares and where key and value meet, and Mamba-3's answer: does
                its two-token term play the conv's role (`modern.py`)

Studies are selected by `study=DIR` (or `study=DIR,DIR`: several, such as training sweeps without a preset), or by
`task`, `scale` (a glob: `paper-d*`), `preset` (a, b: either), `draw` (ATR's grammar draw: `mecheval`, ours from
its seed, or `published`) and `build` (`default`, or `study`: attention built as the study's code builds it): a pool
compares the published values with one design at a time.
`write_pages(root)` fills every block and draws the figures (their numbers in docs/figures/study.csv, per
study spanning several widths docs/figures/widths/SCALE-NAME.csv, per pool docs/figures/pooled/NAME*.csv);
`stale_pages(root)` names what differs from the files now (the test that keeps the pages true).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from mecheval.common import atomic_write_text, check_inside, flatten, safe_mkdir
from mecheval.report import published
from mecheval.interventions.runs import verdict_is_current
from mecheval.interventions.terms import TERMS
from mecheval.report.analyse import (best_runs, conv_evidence_by_run, formation_table, state_table, study_findings,
                                     study_meta, summarise)
from mecheval.report.build import FORMATION_NOTE
from mecheval.report.compare import heldout_cells, published_accuracy, published_heldout, published_verdict
from mecheval.report.decide import HIGH_ACC, INCONCLUSIVE, NOT_REPRODUCED, NOT_RUN, REPRODUCED, RULE, compare_accuracy
from mecheval.report.findings import ACCURACY, FINDINGS, MECHANISM, Finding, Outcome, checked, conv_evidence, finding_row
from mecheval.report.fit import FIT_NOTE, any_fits_only, fit_table
from mecheval.report.results import HELDOUT_READ_ACC, HELDOUT_VALUE, study_table
from mecheval.report.timelines import formation_steps, timeline_table
from mecheval.report.widths import readable_widths, spans_widths, width_table
from mecheval.store import runs as store_runs, studies as store_studies
from mecheval.study.command import rebuilds_spec, study_command
from mecheval.sweeps.runner import RUNS, SPEC
from mecheval.sweeps.spec import run_overrides
from mecheval.training.lock import DirLock
from mecheval.training.run_dir import RunDir
from pages.markup import md_code, md_text, slug
from pages.modern import modern_rows, term_answer, term_archs
from pages.pooled import STUDY, attribution_runs, left_out, pooled_summary, pooled_table, published_medians
from pages.rates import SEEDS_WANTED, bracket_table, committed_runs, coverage_summary, coverage_table, other_build, rate_figure, rate_table

BLOCK = re.compile(r"(<!-- generated: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)
RESULTS = "results"
EARLIER_RULES = "†"  # marks a verdict.json decided by rules older than the current ones
EARLIER_NOTE = ("decided by earlier rules (point estimates, not intervals); `mecheval relabel STUDY_DIR` decides "
                "a study's verdicts anew from its committed tables.")
FIGURE_DIR = Path("docs/figures")
FIGURE_DATA = FIGURE_DIR / "study.csv"  # the study figure's numbers: checked like a page
FIGURE_PNGS = FIGURE_DIR / "study"  # the study figure, one PNG per (task, scale): `study_figure.figure_name`
WIDTH_DIR = FIGURE_DIR / "widths"  # per study spanning several widths: SCALE-NAME.csv (checked like a page) and .png
RATES_DATA, RATES_PNG = FIGURE_DIR / "rates.csv", FIGURE_DIR / "rates.png"  # the `rates` block's figure
# published-scale studies of other builds and protocols (Mamba's initialisations, attention's data protocols):
# not cells of the published tables, so left out of the rates and the coverage
PUBLISHED_SCALES = "paper-d*"  # the scales of the published design (its widths); the findings block reads these
EXPLORATIONS = ("paper-d64/mamba-published", "paper-d64/attention-protocol")
POOL_DIR = FIGURE_DIR / "pooled"  # per `pooled` block: NAME.csv (the box figure's runs) and NAME-widths.csv, with .png


class PageError(ValueError):
    """A generated block the generator cannot fill: the page and the block are named."""


def pages(root: Path) -> list[Path]:
    """README.md and every markdown page under docs/ (paths relative to `root`)."""
    found = [Path("README.md")] if (root / "README.md").exists() else []
    return found + sorted(p.relative_to(root) for p in (root / "docs").rglob("*.md"))


def studies(root: Path) -> list[Path]:
    """Every study directory under results/ (relative to `root`): a directory holding runs/, at
    results/SCALE/NAME, SCALE naming where it ran (`cpu`, `paper-d64`); a study that has not ended
    (`store.studies.running`: its finished runs committed so that none is lost) is left out until it ends."""
    return sorted(p.relative_to(root) for p in (root / RESULTS).glob("*/*")
                  if (p / RUNS).is_dir() and not store_studies.running(p))


@functools.lru_cache(maxsize=None)
def _table(path: str) -> pd.DataFrame:
    """The study's `study_table` of every run under its runs/, whether its latest sweep.yaml names it or not."""
    return study_table(path, every_run=True)


def _figure_tables(root: Path) -> dict[Path, pd.DataFrame]:
    """The study figure's studies (those with a study.json) -> their `_table`."""
    return {study: _table(str(root / study)) for study in studies(root) if study_meta(root / study)}


def _task(study: Path) -> str:
    return str(_table(str(study))["task.name"].iloc[0])


def _draw(study: Path) -> str:
    """The ATR grammar draw the study's runs trained on (`ATRParams.grammar_draw`; `mecheval` where not set)."""
    draw = _table(str(study)).get("task.params.grammar_draw", pd.Series(dtype=object)).dropna()
    return str(draw.iloc[0]) if len(draw) else "mecheval"


def _build(study: Path) -> str:
    """`study` where the study's runs are built as the study's code builds them and their presets' runs are not
    (`mecheval study --build study` for attention: `rates.other_build`), else `default`."""
    return "study" if other_build(_table(str(study))).any() else "default"


def _spec(text: str, page: Path) -> tuple[str, dict[str, str]]:
    kind, *args = text.split()
    try:
        return kind, dict(a.split("=", 1) for a in args)
    except ValueError:
        raise PageError(f"{page}: generated block '{text}': arguments are key=value") from None


def _num(v, digits: int = 2) -> str:
    return "–" if v is None or v != v else f"{float(v):.{digits}f}"


def _interval(row: pd.Series, col: str) -> str:
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    if lo is None or lo != lo:
        return _num(row.get(col))
    return f"{_num(row[col])} [{_num(lo)}, {_num(hi)}]"


def _markdown(rows: list[dict]) -> str:
    if not rows:
        return "(none)"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]).replace("|", "\\|") for c in cols) + " |" for r in rows]
    return "\n".join(lines)


# ---- the findings at a glance ------------------------------------------------------------------------

def _link(root: Path, page: Path, study: Path, index: dict[Path, Path]) -> str:
    """A relative link from `page` to the section of the page whose `studies` block shows `study`."""
    target = index.get(study)
    if target is None:
        return f"`{study}`"
    rel = os.path.relpath(target, page.parent).replace(os.sep, "/")
    return f"[{md_text(f'{study.parent.name}/{study.name}')}]({rel}#{anchor(study)})"


def anchor(study: Path) -> str:
    return slug(f"{study.parent.name}-{study.name}")


def _seeds(df: pd.DataFrame) -> str:
    seeds = sorted(int(s) for s in df["seed"].dropna().unique())
    return f"{len(seeds)} ({', '.join(map(str, seeds))})"


def _examples(df: pd.DataFrame) -> str:
    """The intervention examples per run behind the verdicts (a range where runs differ)."""
    ns = sorted({int(n) for n in df.get("n_all", pd.Series(dtype=float)).dropna()})
    return "–" if not ns else str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"


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
                    "seeds": _seeds(best), "examples": _examples(best), "scale": scale, "study": link}))

    for study in studies(root):
        meta = study_meta(root / study)
        if meta.get("findings") and _named(study, scale, name):
            df = _table(str(root / study))
            check(meta["findings"], best_runs(df), md_text(study.parent.name), _link(root, page, study, index))
    for pool_page, args in pooled_specs(root):  # the pages' pools: several studies' seeds read as one
        chosen, df = _pooled(root, args, pool_page)
        if not any(_named(s, scale, name) for s in chosen):
            continue
        name = _pool_name(args, pool_page)
        rel = os.path.relpath(pool_page, page.parent).replace(os.sep, "/")
        scales = ", ".join(sorted({s.parent.name for s in chosen}))
        check(_pool_findings(root, chosen), best_runs(df), f"{scales} (pooled)", f"[{name}]({rel}#{POOL_ANCHOR}{name})")
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
    for pool_page, args in pooled_specs(root):
        chosen, df = _pooled(root, args, pool_page)
        if not all(fnmatch.fnmatchcase(s.parent.name, scale) for s in chosen):
            continue
        name = _pool_name(args, pool_page)
        link = f"[{name}]({os.path.relpath(pool_page, page.parent).replace(os.sep, '/')}#{POOL_ANCHOR}{name})"
        top = best_runs(df)
        for fid in _pool_findings(root, chosen):
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
                     "seeds": _seeds(mine), "learning rates": _rates(df[df["arch"].isin(finding.archs)]),
                     "examples per run": _examples(mine), "what does not reproduce": _failing(finding, top), "pool": link})
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
        raise PageError(f"{page}: generated block 'rounding {_args(args)}': no study {missing or 'listed'} under results/")
    seeds = [int(args["seed"])] if "seed" in args else None
    rows = []
    for study in chosen:
        best = _table(str(root / study))
        found = study_findings(root / study, seeds, best)
        mamba = best_runs(best, seeds).query("arch == 'mamba'")
        cells = [e for d in mamba["run_dir"] if (e := conv_evidence(d))]
        rows.append({"study": f"`{study}`", **{f"`{f}`": o.status for f, o in found.items()},
                     "Mamba's conv cell": "; ".join(f"L{e['layer']} key+{e['offset']} {e['attrib']:.2f} [{e['lo']:.2f}, "
                                                    f"{e['hi']:.2f}]" for e in cells) or "–"})
    return rows


# ---- one study ---------------------------------------------------------------------------------------

def _conv_binding(row: pd.Series) -> str:
    if row.get("verdict") in (None, "not learned") or row.get("verdict") != row.get("verdict"):
        return "–"  # the best cell of a model that did not learn is noise
    e = conv_evidence(row["run_dir"])
    if e is None:
        return "–"
    return f"layer {e['layer']} key+{e['offset']}: {e['attrib']:.2f}; taps cut → {e['cut_acc']:.2f}"


def _accuracy_read(row: pd.Series) -> str:
    """The readout's accuracy outside the conv reach with its n (all examples where none lies outside)."""
    for col, n in (("acc_outside", "n_outside"), ("acc_all", "n_all")):
        if row.get(col) is not None and row.get(col) == row.get(col):
            suffix = "" if col == "acc_outside" else ", all"
            return f"{_interval(row, col)} ({int(row[n])}{suffix})"
    return "–"


def _steps(row: pd.Series) -> str:
    steps = row.get("summary.steps")
    if steps is None or steps != steps:
        return "–"
    return f"{int(steps):,}" + (" (early stop)" if row.get("summary.stopped_early") is True else "")


def run_rows(study: Path) -> list[dict]:
    """One row per finished run of the study (every run directory, sweep.yaml or not)."""
    df = _table(str(study))
    df = df[df["status"] == "done"].sort_values(["arch", "model.d_model", "optim.lr", "seed"], kind="stable")
    heldout = "acc_heldout" in df and df["acc_heldout"].notna().any()
    named = not (study / SPEC).exists()
    widths = df["model.d_model"].nunique()  # a width column only where the study varies it (else in its heading)
    rows = []
    for _, r in df.iterrows():
        learned = isinstance(r.get("verdict"), str) and r["verdict"] != "not learned"
        task, grammar = r["task.name"], r.get("task.params.grammar")
        pub_acc = published_accuracy(task, grammar if isinstance(grammar, str) else None, r["arch_name"],
                                     r["arch_conv"], int(r["model.d_model"]), r["arch"])
        pub_verdict = published_verdict(task, r["arch"])
        row = {"run": md_text(r["name"])} if named else {}  # hand-made runs: the name says what differs
        row |= {"architecture": md_text(r["arch"]), **({"d": int(r["model.d_model"])} if widths > 1 else {}),
                "lr": f"{r['optim.lr']:g}",
                "seed": int(r["seed"]), "test acc": _num(r["acc"], 3)}
        if heldout:  # the generalisation split: accuracy and @value on the held-out pairs, the study's beside
            pub_acc_heldout, pub_value = published_heldout(r["arch"], int(r["model.d_model"]))
            acc, lo, compared = _num(r.get("acc_heldout"), 3), r.get(f"{HELDOUT_READ_ACC}_lo"), ""
            if lo is not None and lo == lo:  # read on held-out examples too: that accuracy's interval, compared
                acc += f"; {_interval(r, HELDOUT_READ_ACC)} on {int(r['heldout.n_all'])}"
                compared = compare_accuracy(r[HELDOUT_READ_ACC], lo, r[f"{HELDOUT_READ_ACC}_hi"], pub_acc_heldout)
            row |= heldout_cells(acc, pub_acc_heldout, compared, _interval(r, HELDOUT_VALUE) if learned else "–", pub_value)
        verdict = r["verdict"] if isinstance(r.get("verdict"), str) else "not read"
        if verdict != "not read" and not verdict_is_current(Path(r["run_dir"])):
            verdict += " " + EARLIER_RULES
        row |= {"acc outside conv reach (n)": _accuracy_read(r), "published acc": _num(pub_acc),
                "verdict (published)": verdict + (f" ({pub_verdict})" if pub_verdict else ""),
                **{f"@{role}": _interval(r, f"attrib@{role}") if learned else "–" for role in ("key", "value", "query")},
                "conv binding": _conv_binding(r), "steps": _steps(r)}
        rows.append(row)
    return rows


def _task_line(study: Path) -> str:
    df = _table(str(study))
    first = df.iloc[0]
    params = {k.removeprefix("task.params."): v for k, v in first.items()
              if k.startswith("task.params.") and v is not None and v == v}
    shown = ", ".join(md_text(f"{k} {v}") for k, v in params.items()) or "its default parameters, the published ones"
    layers = sorted(df["model.n_layers"].dropna().astype(int).unique())
    widths = sorted(df["model.d_model"].dropna().astype(int).unique())
    return (f"Task {md_code(first['task.name'])} ({shown}); {'/'.join(map(str, layers))} layer{'' if layers == [1] else 's'} of width "
            f"{'/'.join(map(str, widths))}; "
            f"{(done := int((df['status'] == 'done').sum()))} finished run{'' if done == 1 else 's'}.")


# ---- accuracy against width -------------------------------------------------------------------------

def widths_data(root: Path, study: Path) -> pd.DataFrame | None:
    """`widths.width_table` of the study's best-learning-rate runs; None where they span one width."""
    df = _table(str(root / study))
    summary = summarise(df)
    return width_table(summary, df) if spans_widths(summary) else None


def width_files(study: Path) -> tuple[Path, Path]:
    """(CSV, PNG) of the study's accuracy-against-width figure, relative to the repository."""
    return WIDTH_DIR / f"{anchor(study)}.csv", WIDTH_DIR / f"{anchor(study)}.png"


def width_section(root: Path, study: Path, page: Path) -> str:
    """The figure (linked from `page`) and the table of accuracy against width; empty for one width."""
    table = widths_data(root, study)
    if table is None:
        return ""
    png = os.path.relpath(width_files(study)[1], page.parent).replace(os.sep, "/")
    return "\n".join([
        f"Accuracy against width ({md_text(f'{study.parent.name}/{study.name}')}; best learning rate per width; ours, the final "
        f"test accuracy on every test prompt as the published ones were read, solid with 95% intervals, published "
        f"dashed), compared by intervals: {RULE}.", "",
        f"![Accuracy against width, ours beside the published values]({png})", "",
        _markdown(readable_widths(table).astype(str).to_dict("records")), ""])


def widths_block(root: Path, args: dict[str, str], page: Path) -> str:
    sections = [width_section(root, s, page) for s in _chosen(root, "widths", args, page)]
    return "\n".join(filter(None, sections)) or "(no study here spans several widths yet)"


# ---- several studies read as one ----------------------------------------------------------------------

POOL_FIGURES = {"boxes": "", "widths": "-widths"}  # figure -> its files' suffix after NAME
POOL_ANCHOR = "pooled-"  # a pooled block's anchor on its page: pooled-NAME


def _pool_name(args: dict[str, str], page: Path) -> str:
    name = args.get("name", "")
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        raise PageError(f"{page}: generated block 'pooled {_args(args)}': name=NAME (lower-case letters, digits "
                        "and '-') names its figures")
    return name


@functools.lru_cache(maxsize=None)
def _pool(root: Path, chosen: tuple[Path, ...]) -> pd.DataFrame:
    return pooled_table([root / s for s in chosen])


def _pooled(root: Path, args: dict[str, str], page: Path) -> tuple[list[Path], pd.DataFrame]:
    """A pooled block's studies and `pooled.pooled_table` of them; a pool of two designs names the page."""
    chosen = _chosen(root, "pooled", args, page)
    try:
        df = _pool(root, tuple(chosen))
    except ValueError as e:
        raise PageError(f"{page}: generated block 'pooled {_args(args)}': {e}") from None
    if "archs" not in args:
        return chosen, df
    df = df[df["arch"].isin(args["archs"].split(","))].reset_index(drop=True)
    if df.empty:
        raise PageError(f"{page}: generated block 'pooled {_args(args)}': no run of {args['archs']} in the studies matched")
    return [s for s in chosen if str(root / s) in set(df[STUDY])], df


def _pool_findings(root: Path, chosen: list[Path]) -> list[str]:
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
    chosen, df = _pooled(root, args, page)
    data = {}
    runs = attribution_runs(df)
    if (runs["verdict"] != "not learned").any():
        data["boxes"] = runs
    summary = summarise(df)
    if spans_widths(summary):
        data["widths"] = width_table(summary, df)
    return chosen, df, data


def pooled_block(root: Path, args: dict[str, str], page: Path) -> str:
    name = _pool_name(args, page)
    chosen, df, data = pool_data(root, args, page)
    done = int((df["status"] == "done").sum())
    out = [f'<a id="{POOL_ANCHOR}{name}"></a>', "",
           f"The runs of {', '.join(f'`{s}`' for s in chosen)} read as one study: {done} finished runs (every run "
           "directory under their runs/, whether the latest sweep.yaml names it or not; a run committed in more than "
           "one study counted once), the best learning rate per architecture chosen over all of them. "
           + _left_out(root, df) + " *acc read*: the accuracy the readouts read (test prompts unseen in training, "
           "outside the conv reach, where intervened on); *test acc*: the final test accuracy on every test prompt, "
           "seen or not, as the published accuracies were read, and the one compared with them; attributions at the "
           "verdict's read point: means over seeds with 95% intervals (the multi-bootstrap over seeds and examples; "
           f"one seed: its own), the published median in brackets. Compared: {RULE}.", "",
           _markdown(pooled_summary(df).to_dict("records")), ""]
    rows = findings_checked(_pool_findings(root, chosen), df)
    if rows:
        out += ["The findings these studies check, on the pooled best-learning-rate runs (every seed):", "",
                _markdown(rows), ""]
    best = best_runs(df).sort_values("model.d_model", kind="stable")  # `best_lr` marks finished runs only
    formed = formation_table(best, conv_evidence_by_run(best))
    if not formed.empty:  # across widths: the layer that binds key and value may move
        out += ["Where the association is formed, per run. " + FORMATION_NOTE, "",
                _markdown(formed.astype(str).to_dict("records")), ""]
    captions = {"boxes": "@key / @value / @query per architecture, one point per run (a box from 3 runs), the published "
                         "medians as black ticks",
                "widths": "Accuracy against width, ours solid with 95% intervals, published dashed"}
    for figure in data:
        png = os.path.relpath(pool_files(name, figure)[1], page.parent).replace(os.sep, "/")
        out += [f"![{captions[figure]}]({png})", ""]
    return "\n".join(out)


def _left_out(root: Path, df: pd.DataFrame) -> str:
    """`Left out: …`, each run the tables do not read in full with its reason (`pooled.left_out`; paths relative
    to the repository), or that every run is read."""
    named = df.assign(**{STUDY: [os.path.relpath(s, root) for s in df[STUDY]]}) if STUDY in df else df
    runs = left_out(named)
    return ("Left out: " + "; ".join(f"`{r}`" for r in runs) + ".") if runs else "No run is left out."


def pooled_specs(root: Path) -> list[tuple[Path, dict[str, str]]]:
    """(page, arguments) of every `pooled` block of the pages."""
    found = []
    for page in pages(root):
        for m in BLOCK.finditer((root / page).read_text()):
            kind, args = _spec(m["spec"], page)
            if kind == "pooled":
                found.append((page, args))
    return found


def findings_checked(fids: list[str], table: pd.DataFrame) -> list[dict]:
    """The findings `fids` checked on the best-learning-rate rows of `table` (a study's, or a pool's), one row
    each (and per ATR grammar: `findings.checked`; claim, outcome, parts, seeds, evidence: `findings.finding_row`),
    leaving out those whose architectures have not run."""
    return [finding_row(claim, o) for _, claim, o in checked(fids, best_runs(table)) if o.status != NOT_RUN]


def _made_by(path: Path, command: str) -> str:
    """`Made by COMMAND.`, saying where the preset has changed since (`rebuilds_spec`) and where earlier calls
    made some of the runs (run directories the spec does not name)."""
    named = {name for name, _ in run_overrides(store_studies.spec(path / SPEC))}
    runs = {d.name for d in (path / RUNS).iterdir() if d.is_dir()} if (path / RUNS).is_dir() else set()
    text = f"Made by {md_code(command)}" if runs <= named else (
        f"{md_code(command)} makes {len(runs & named)} of its {len(runs)} runs; earlier calls made the others (each run's "
        "`config.yaml` says how)")
    return text + ("." if rebuilds_spec(path) is not False else " (the preset has changed since: the command makes "
                   "today's version, and the directory's `sweep.yaml` is what ran).")


def study_section(root: Path, study: Path, page: Path) -> str:
    """A study's heading, what it ran, its findings, its runs and, where computed, the readouts beyond
    the verdict."""
    path = root / study
    meta = study_meta(path)
    preset = (f" Preset {md_code(meta['preset'])}, {md_text(meta.get('scale', study.parent.name))} scale."
              if "preset" in meta else "")
    out = [f'<a id="{anchor(study)}"></a>', "", f"### {md_text(study.name)} ({md_text(study.parent.name)})", "",
           f"{md_code(study)}.{preset} " + _task_line(path)
           + (f" {md_text(meta['description'])}" if meta.get("description") else "")
           + (" Report: `report.md` in the directory (`mecheval report DIR` writes the self-contained `report.html`"
              " beside it)." if (path / "report.md").exists() else ""), ""]
    command = study_command(path, out=str(study))
    if command:  # what made it, and resumes it
        out += [_made_by(path, command), ""]
    rows = findings_checked(meta.get("findings", []), _table(str(path)))
    if rows:
        out += ["Findings, on the best-learning-rate runs:", "", _markdown(rows), ""]
    runs = run_rows(path)
    out += ["Runs (acc outside the conv reach and attributions: 95% intervals; `–` where a run did not learn):",
            "", _markdown(runs), ""]
    if left_out(_table(str(path))):
        out += [_left_out(root, _table(str(path))), ""]
    widths = width_section(root, study, page)
    if widths:
        out += [widths]
    if any(EARLIER_RULES in r["verdict (published)"] for r in runs):
        out += [f"{EARLIER_RULES} Verdict {EARLIER_NOTE}", ""]
    every = _table(str(path))
    every = every[every["status"] == "done"]
    states = state_table(every)
    if not states.empty:
        out += ["What the recurrent state carries (per layer: where the association enters the state, how far on "
                "it holds it, the most it restores, and what it carries when the answer is read):", "",
                _markdown(states.astype(str).to_dict("records")), ""]
    out += _fit_lines(every)
    timelines = formation_steps(every)
    over = timeline_table(every, timelines) if timelines else pd.DataFrame()
    if not over.empty:
        out += ["Over training (snapshots; a step at chance reads not learned; formed at: the first kept step from which the final verdict holds):", "",
                _markdown(over.astype(str).to_dict("records")), ""]
    return "\n".join(out).rstrip() + "\n"


def modern_block(root: Path, args: dict[str, str], page: Path) -> str:
    """The chosen studies read as one (`pooled.pooled_table`: seeds of another study join the same best rate):
    `modern.modern_rows` and, per term and architecture with its reading, `modern.term_answer`'s sentence."""
    chosen = _chosen(root, "modern", args, page)
    try:
        df = _pool(root, tuple(chosen))
    except ValueError as e:
        raise PageError(f"{page}: generated block 'modern {_args(args)}': {e}") from None
    best = df[df["best_lr"]]
    out = [f"{', '.join(md_code(s) for s in chosen)}{' read as one' if len(chosen) > 1 else ''}:", "",
           _markdown(modern_rows(summarise(df), best)), ""]
    for term in TERMS.values():
        out += [line for arch in term_archs(best, term) for line in (term_answer(best, arch, term)[1], "")]
    out += _fit_lines(best)
    over_training = timeline_table(best, formation_steps(best))
    if not over_training.empty:
        out += ["Over training (the runs kept with snapshots, `timeline.parquet`: the readouts at every kept step on "
                "the same examples; a step at chance reads not learned); formed at: the first kept step from which the verdict "
                "stays the final one:", "",
                _markdown(over_training.sort_values(["arch", "seed"]).to_dict("records")), ""]
    return "\n".join(out)


def _fit_lines(runs: pd.DataFrame) -> list[str]:
    """The fit-to-the-training-set table of `runs` (`fit.fit_table`) with its note, where one of them reads
    `fits its training set only`; else nothing."""
    fit = fit_table(runs)
    return ["Fit to the training set. " + FIT_NOTE, "", _markdown(fit.to_dict("records")), ""] if any_fits_only(fit) else []


def studies_block(root: Path, args: dict[str, str], page: Path) -> str:
    return "\n".join(study_section(root, s, page) for s in _chosen(root, "studies", args, page))


def _chosen(root: Path, kind: str, args: dict[str, str], page: Path) -> list[Path]:
    """The studies a `kind` block's arguments select (`_matches`); PageError where none does."""
    chosen = [s for s in studies(root) if _matches(root, s, args)]
    if not chosen:
        raise PageError(f"{page}: generated block '{kind} {_args(args)}': no study under results/ matches")
    return chosen


def _matches(root: Path, study: Path, args: dict[str, str]) -> bool:
    if "study" in args:  # one study, or several: study=results/cpu/a,results/cpu/b
        return study in map(Path, args["study"].split(","))
    return (fnmatch.fnmatchcase(study.parent.name, args.get("scale", "*"))
            and args.get("task", _task(root / study)) == _task(root / study)
            and ("preset" not in args or study_meta(root / study).get("preset") in args["preset"].split(","))
            and ("draw" not in args or _draw(root / study) in args["draw"].split(","))
            and ("build" not in args or _build(root / study) in args["build"].split(",")))


def _args(args: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in args.items())


# ---- what runs cost ---------------------------------------------------------------------------------

def _minutes(values: pd.Series) -> str:
    """Median minutes per run, with the range where runs differ; – where none recorded it."""
    m = (values.dropna().astype(float) / 60).sort_values()
    if m.empty:
        return "–"
    lo, med, hi = m.iloc[0], m.median(), m.iloc[-1]
    return f"{med:.0f}" if round(lo) == round(hi) else f"{med:.0f} ({lo:.0f}–{hi:.0f})"


def cost_rows(root: Path, args: dict[str, str], page: Path) -> list[dict]:
    """Per chosen study (`_chosen`), and per architecture with `by=arch`: the finished runs' steps and minutes
    per run. Wall minutes are one thread's per run (the studies' workers train with one thread each, two at
    once on two cores, often beside other work, so they overstate the core-minutes); CPU minutes are the
    training process's own CPU time (summary.json `cpu_time_s`, recorded since 2026-12-03); device, where the
    runs trained (`cpu`, `cuda`: on a GPU the CPU minutes are the process's, not the GPU's)."""
    rows = []
    for study in _chosen(root, "costs", {k: v for k, v in args.items() if k != "by"}, page):
        df = _table(str(root / study))
        df = df[df["status"] == "done"]
        if df.empty:  # a study still training: no finished run to cost yet
            continue
        groups = df.groupby("arch", sort=True) if args.get("by") == "arch" else [(None, df)]
        for arch, part in groups:
            cpu = part["summary.cpu_time_s"] if "summary.cpu_time_s" in part else pd.Series(dtype=float)
            steps = part["summary.steps"].dropna().astype(int)
            rows.append({"study": md_text(f"{study.parent.name}/{study.name}"), **({"architecture": md_text(arch)} if arch else {}),
                         "runs": len(part), "steps per run": f"{int(steps.median()):,}" if len(steps) else "–",
                         "wall min per run": _minutes(part["summary.wall_time_s"]), "CPU min per run": _minutes(cpu),
                         "steps/s": _num(part["summary.steps_per_s"].median(), 1),
                         "device": ", ".join(sorted(part["summary.device"].dropna().unique())) if "summary.device" in part else "–"})
    return rows


# ---- learning rates, coverage, prompts seen in training -------------------------------------------------

@functools.lru_cache(maxsize=None)
def rates_data(root: Path) -> pd.DataFrame:
    """`rates.rate_table` of every published-scale study's runs (results/paper-d*/, but EXPLORATIONS), each run's
    `study` its study's path relative to `root`."""
    chosen = [s for s in studies(root) if s.parent.name.startswith("paper-d")
              and f"{s.parent.name}/{s.name}" not in EXPLORATIONS]
    return rate_table(committed_runs([_table(str(root / s)).assign(study=s) for s in chosen]))


def rates_block(root: Path, page: Path, index: dict[Path, Path]) -> str:
    """The rates figure, how many cells tried how many rates and have their best bracketed, and the cells that
    do not agree with the study (`rates.bracket_table`), each with the part that differs."""
    table = rates_data(Path(root))
    if table.empty:
        raise PageError(f"{page}: the rates block finds no published-scale runs (results/paper-d*/)")
    cells = table[table["best"]]
    rel = os.path.relpath(RATES_PNG, page.parent).replace(os.sep, "/")
    apart = bracket_table(table, link=lambda study: _link(root, page, study, index))
    return (f"![Accuracy and verdict of every published-scale cell at every learning rate tried]({rel})\n\n"
            f"{len(cells)} cells (task, grammar, architecture, width) at the published scale: "
            f"{int((cells['rates'] >= 3).sum())} tried 3 or more learning rates; the best rate is bracketed by a worse "
            f"one on each side in {int(cells['bracketed'].sum())} (in the figure: a solid outline), at the edge of "
            f"what was tried in {int((~cells['bracketed']).sum())} (dashed). The {len(apart)} cells whose accuracy at "
            f"their best rate does not agree with the published value, with the part that differs (each rate's mean "
            f"accuracy, ×n: its seeds where more than one; the best rate in bold, chosen on the seeds every rate ran, "
            f"so that it can have the lower mean where it alone ran more seeds; the mechanism: our most common verdict "
            f"at that rate, the published label in brackets; next: the runs that would settle the cell, the grid's rate "
            f"beyond a best at the edge or, where a bracketed best still differs, the seeds it lacks of "
            f"{SEEDS_WANTED}; min a run: the median minutes of training one of its runs, CPU minutes where recorded; "
            f"studies: the studies whose runs these are, each linked to its section, which gives the command that made "
            f"it and resumes it):\n\n"
            + _markdown(apart.to_dict("records")))


def coverage_block(root: Path) -> str:
    """The coverage counts (`rates.coverage_summary`) and the rule that compares."""
    summary = coverage_summary(coverage_table(rates_data(Path(root))))
    return (_markdown(summary.to_dict("records")) + f"\n\nCompared: a cell with a committed run at the published "
            f"scale; its accuracy is the best rate's (mean over seeds). {RULE}")


def _design(config) -> dict:
    """A run's identity (the fields that change its weights or metrics) as flat fields without its seed: what a
    trial sweep holds fixed."""
    return {k: v for k, v in flatten(config.identity()).items() if k != "seed" and v != "{}"}


def _differences(trial: dict, main: list[dict]) -> str:
    """How `trial` differs from the nearest of the main job's designs (the fewest fields apart)."""
    if not main:
        return "–"
    nearest = min(main, key=lambda m: sum(trial.get(k) != m.get(k) for k in trial.keys() | m.keys()))
    apart = sorted(k for k in trial.keys() | nearest.keys() if trial.get(k) != nearest.get(k))
    return "; ".join(f"{k} {_value(nearest.get(k))} → {_value(trial.get(k))}" for k in apart) or "none"


def _value(v) -> str:
    """A config value as the table shows it (None: the field is not set, so its default holds)."""
    return "default" if v is None else f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def design_rows(root: Path, args: dict[str, str], page: Path) -> list[dict]:
    """Per trial sweep under `dir=` (each subdirectory with runs/, a sweep of one design over seeds): the design
    (architecture, learning rate, batch, schedule steps, and the fields in which it differs from the nearest
    design of the main job's runs under `main=`), each seed's final test accuracy (its last evaluation), how
    many seeds learned (final test accuracy >= HIGH_ACC) and the training CPU minutes. Finished runs only."""
    where = root / args.get("dir", "")
    sweeps = sorted(p.parent for p in where.glob(f"*/{RUNS}")) if "dir" in args else []
    if not sweeps:
        raise PageError(f"{page}: generated block 'design {_args(args)}': no sweep under dir=")
    main_runs = sorted((root / args["main"] / RUNS).iterdir()) if "main" in args else []
    main = list({str(d): d for d in (_design(RunDir(r).read_config()) for r in main_runs)}.values())
    rows = []
    for sweep in sweeps:
        runs = [RunDir(r) for r in sorted((sweep / RUNS).iterdir()) if RunDir(r).finished]
        configs = [r.read_config() for r in runs]
        finals = {c.seed: [m for m in store_runs.metrics(r.path) if "eval" in m][-1]["eval"]["test"]["acc"] for r, c in zip(runs, configs)}
        cpu = sum(store_runs.summary(r.path)["cpu_time_s"] for r in runs) / 60
        designs = {str(d): d for d in map(_design, configs)}
        if len(designs) != 1:
            raise PageError(f"{page}: generated block 'design {_args(args)}': {sweep} mixes {len(designs)} designs")
        [design] = designs.values()
        c = configs[0]
        rows.append({"trial": md_code(str(sweep.relative_to(root))), "architecture": c.model.preset,
                     "lr": f"{c.optim.lr:g}", "batch": c.batch_size, "schedule (steps)": f"{c.steps:,}",
                     **({"differs from the main job in": _differences(design, main)} if "main" in args else {}),
                     "final test accuracy by seed": ", ".join(f"{s}: {a:.2f}" for s, a in sorted(finals.items())),
                     "learned": f"{sum(a >= HIGH_ACC for a in finals.values())} of {len(finals)}",
                     "CPU min": f"{cpu:.1f}"})
    return rows


def prompt_rows(root: Path) -> list[dict]:
    """Per scale and task (ATR: grammar) of the runs read on prompts unseen in training (verdict.json `prompts`):
    the studies and runs, the share of test prompts seen in training (range over runs), and the mean accuracy
    on all prompts and on the unseen ones."""
    parts = []
    for study in studies(root):
        df = _table(str(root / study))
        if "seen_share" in df and df["seen_share"].notna().any():
            read = df[df["seen_share"].notna()]
            grammar = read.get("task.params.grammar", pd.Series(None, index=read.index, dtype=object))
            grammar = grammar.astype(object).fillna("easy")
            task = read["task.name"].astype(str) + (" (" + grammar + ")").where(read["task.name"] == "atr", "")
            parts.append(read.assign(scale=study.parent.name, task=task, study=study.name))
    if not parts:
        return []
    rows = []
    for (scale, task), g in pd.concat(parts, ignore_index=True).groupby(["scale", "task"], sort=True):
        share = g["seen_share"].astype(float)
        rows.append({"scale": scale, "task": task, "studies": g["study"].nunique(), "runs read": len(g),
                     "test prompts seen in training": _num(share.min()) if _num(share.min()) == _num(share.max())
                     else f"{_num(share.min())}–{_num(share.max())}",
                     "acc, all prompts": _num(g["acc_all_prompts"].astype(float).mean()),
                     "acc, unseen prompts": _num(g["acc_all"].astype(float).mean())})
    return rows


def pointer_rows(root: Path) -> list[dict]:
    """Every committed learned run whose query side carries part of the effect (@query's interval above LOW) and
    that has a pointer control (`interventions.pointer`): its verdict, @query, and the shares of patched outputs
    that follow the answer and the value's old position, with their intervals."""
    from mecheval.interventions.pointer import POINTER, POINTER_COLUMNS
    from mecheval.interventions.verdict import LOW

    rows = []
    for study in studies(root):
        df = _table(str(root / study))
        if "attrib@query_lo" not in df:
            continue
        for _, r in df[df["attrib@query_lo"].astype(float) > LOW].iterrows():
            path = Path(r["run_dir"]) / POINTER
            if r["verdict"] == "not learned" or not path.exists():
                continue
            p = store_runs.table(path, POINTER_COLUMNS).iloc[0]
            rows.append({"study": md_text(f"{study.parent.name}/{study.name}"), "architecture": md_text(r["arch"]),
                         "seed": _num(r.get("seed"), 0), "verdict": r["verdict"], "@query": _interval(r, "attrib@query"),
                         "follows the answer": _interval(p, "answer"), "follows the old position": _interval(p, "position"),
                         "n": int(p["n"])})
    return rows


def draw_rates(table: pd.DataFrame, path: Path) -> None:
    """`rates.rate_figure` of `rates_data` (read back from its CSV) as an optimised PNG at `path`."""
    from pages.study_figure import save_figure

    save_figure(rate_figure(table.fillna({"grammar": ""})), path)


# ---- the published numbers ---------------------------------------------------------------------------

def _by_width(table: dict, label: str) -> list[dict]:
    return [{label: k, **{f"d = {w}": _num(v.get(w)) for w, v in [(w, vals) for w in published.WIDTHS]}}
            for k, vals in table.items()]


def published_block(args: dict[str, str], page: Path) -> str:
    name = args.get("table")
    if name == "ar":
        return _markdown(_by_width(published.AR_ACCURACY, "architecture"))
    if name == "mamba_conv":
        return _markdown(_by_width(published.MAMBA_AR_BY_CONV, "Mamba d_conv"))
    if name == "based_conv":
        return _markdown(_by_width(published.BASED_AR_BY_CONV, "Based layer-0 conv"))
    if name == "heldout":
        return _markdown(_by_width(published.ATR_HELDOUT, "architecture"))
    if name == "atr":
        return "\n\n".join(f"**{grammar}**\n\n" + _markdown(_by_width(table, "architecture"))
                           for grammar, table in published.ATR_ACCURACY.items())
    if name == "attribution":
        rows = [{"task": "AR", "architecture": a, "verdict": published.AR_VERDICT.get(a.split(" (")[0], "–"),
                 **{f"@{r}": _num(v[r]) for r in published.ROLES}} for a, v in published.AR_ATTRIBUTION.items()]
        medians = published.ATR_ATTRIB_MEDIANS
        archs = [a for a in published.ATR_ACCURACY["easy"] if any(a in medians.get(r, {}) for r in published.ROLES)]
        rows += [{"task": f"ATR {g}", "architecture": a, "verdict": published.ATR_VERDICT.get(a, "–"),
                  **{f"@{r}": _num(medians.get(r, {}).get(a, {}).get(g)) for r in published.ROLES}}
                 for g in published.ATR_ACCURACY for a in archs]
        return _markdown(rows)
    raise PageError(f"{page}: generated block 'published {_args(args)}': table= one of ar, mamba_conv, "
                    "based_conv, atr, heldout, attribution")


def measured_block(args: dict[str, str], page: Path) -> str:
    """The time a named study's cpu scale took, as its preset states it (`Study.cpu_measured`: the one place a
    study's time is stated; `mecheval study --list` prints it too)."""
    from mecheval.study.presets import STUDIES

    if args.get("study") not in STUDIES:
        raise PageError(f"{page}: generated block 'measured {_args(args)}': study= one of {', '.join(STUDIES)}")
    return f"`mecheval study {args['study']}` took {STUDIES[args['study']].cpu_measured}."


def figure_block(root: Path, args: dict[str, str], page: Path) -> str:
    """The study figure's panels for the scales matching `scale=` (a glob; all where absent), one image per
    (task, scale), each under a line naming it."""
    from pages.study_figure import figure_data, figure_name, groups

    shown = [(t, s) for t, s in groups(figure_data(_figure_tables(root))) if fnmatch.fnmatchcase(s, args.get("scale", "*"))]
    if not shown:
        raise PageError(f"{page}: generated block 'figure {_args(args)}': no committed study of that scale")
    return "\n\n".join(
        f"![{t.upper()} at {s}: the published values beside ours, accuracy and @key / @value / @query per architecture]"
        f"({os.path.relpath(FIGURE_PNGS / figure_name(t, s), page.parent).replace(os.sep, '/')})" for t, s in shown)


# ---- filling the pages ---------------------------------------------------------------------------------

def _index(root: Path) -> dict[Path, Path]:
    """study -> the docs page whose `studies` block shows it (the first such page)."""
    index: dict[Path, Path] = {}
    for page in pages(root):
        if page.name == "README.md":
            continue
        for m in BLOCK.finditer((root / page).read_text()):
            kind, args = _spec(m["spec"], page)
            if kind == "studies":
                for s in studies(root):
                    if _matches(root, s, args):
                        index.setdefault(s, page)
    return index


def _findings_block(root: Path, args: dict[str, str], page: Path, index: dict[Path, Path]) -> str:
    scale = args.get("scale", PUBLISHED_SCALES)
    rows = headline_rows(root, page, scale)
    return headline_summary(rows, scale) + "\n\n" + _markdown(rows)


def _checks_block(root: Path, args: dict[str, str], page: Path, index: dict[Path, Path]) -> str:
    rows = findings_rows(root, page, index, args.get("scale", "*"), args.get("name", "*"))
    body = _markdown(rows)
    if any(EARLIER_RULES in r["ours"] for r in rows):
        body += f"\n\n{EARLIER_RULES} Some of the verdicts behind the outcome were {EARLIER_NOTE}"
    return body


# kind -> its body from (root, the block's arguments, the page, study -> the page showing it)
BLOCKS: dict[str, Callable[[Path, dict[str, str], Path, dict[Path, Path]], str]] = {
    "findings": _findings_block,
    "checks": _checks_block,
    "measured": lambda root, args, page, index: measured_block(args, page),
    "studies": lambda root, args, page, index: studies_block(root, args, page),
    "published": lambda root, args, page, index: published_block(args, page),
    "figure": lambda root, args, page, index: figure_block(root, args, page),
    "widths": lambda root, args, page, index: widths_block(root, args, page),
    "pooled": lambda root, args, page, index: pooled_block(root, args, page),
    "costs": lambda root, args, page, index: _markdown(cost_rows(root, args, page)),
    "rounding": lambda root, args, page, index: _markdown(rounding_rows(root, args, page)),
    "rates": lambda root, args, page, index: rates_block(root, page, index),
    "coverage": lambda root, args, page, index: coverage_block(root),
    "prompts": lambda root, args, page, index: _markdown(prompt_rows(root)),
    "pointers": lambda root, args, page, index: _markdown(pointer_rows(root)),
    "modern": lambda root, args, page, index: modern_block(root, args, page),
    "design": lambda root, args, page, index: _markdown(design_rows(root, args, page)),
}


def render(root: Path, page: Path, spec: str, index: dict[Path, Path]) -> str:
    """The body of one generated block of `page` (`BLOCKS`)."""
    kind, args = _spec(spec, page)
    if kind not in BLOCKS:
        raise PageError(f"{page}: unknown generated block '{kind}' ({', '.join(BLOCKS)})")
    return BLOCKS[kind](root, args, page, index).rstrip() + "\n"


def generate(root: Path) -> dict[Path, str]:
    """page -> its text with every generated block filled, for the pages that have blocks; the study
    figure's data (FIGURE_DATA) and each accuracy-against-width figure's (`width_files`) as CSV text."""
    from pages.study_figure import figure_data

    root = Path(root)
    index = _index(root)
    out = {}
    for page in pages(root):
        text = (root / page).read_text()
        if "<!-- generated:" not in text:
            continue
        out[page] = BLOCK.sub(lambda m: m[1] + render(root, page, m["spec"], index) + m[4], text)
    out[FIGURE_DATA] = figure_data(_figure_tables(root)).to_csv(index=False, float_format="%.4f")
    rates = rates_data(root)
    if len(rates):
        studies_in_words = rates["studies"].map(lambda paths: " ".join(map(str, paths)))  # a CSV cell: space-separated
        out[RATES_DATA] = rates.assign(studies=studies_in_words).to_csv(index=False, float_format="%.4f")
    for study in studies(root):
        table = widths_data(root, study)
        if table is not None:
            out[width_files(study)[0]] = table.to_csv(index=False, float_format="%.4f")
    for page, args in pooled_specs(root):
        for figure, table in pool_data(root, args, page)[2].items():
            out[pool_files(_pool_name(args, page), figure)[0]] = table.to_csv(index=False, float_format="%.4f")
    return out


def stale_pages(root: Path) -> list[Path]:
    """The pages (and figure data) whose committed text differs from what the results give now."""
    root = Path(root)
    return [p for p, text in generate(root).items() if not (root / p).exists() or (root / p).read_text() != text]


def drawings(root: Path) -> list[tuple[Path, Path, Callable[[pd.DataFrame, Path], None]]]:
    """(CSV, PNG, draw) of every figure the pages show, each drawn from its CSV: the study figure, each study's
    accuracy against width, each `pooled` block's figures (those whose CSV `generate` writes)."""
    from pages.study_figure import draw, figure_name, groups

    shown = groups(pd.read_csv(root / FIGURE_DATA)) if (root / FIGURE_DATA).exists() else []
    return ([(FIGURE_DATA, FIGURE_PNGS / figure_name(t, s), functools.partial(draw, task=t, scale=s)) for t, s in shown]
            + [(RATES_DATA, RATES_PNG, draw_rates)]
            + [(*width_files(s), draw_widths) for s in studies(root)]
            + [(*pool_files(_pool_name(args, page), figure), draw_widths if figure == "widths" else draw_boxes)
               for page, args in pooled_specs(root) for figure in POOL_FIGURES])


def write_pages(root: Path) -> list[Path]:
    """Fill every generated block and draw the figures (`drawings`; each where its data changed or its PNG
    is missing); returns the files that changed. Holds docs/'s lock (one `make pages` at a time); every
    file is written whole or not at all and never through a symbolic link (`common.atomic_write_bytes`)."""
    root = Path(root)
    changed = []
    with DirLock(root / "docs", "documentation"):
        for page, text in generate(root).items():
            path = root / page
            if not path.exists() or path.read_text() != text:
                safe_mkdir(path.parent, root)
                atomic_write_text(path, text, root)
                changed.append(page)
        for data, png, draw in drawings(root):
            if (root / data).exists() and (data in changed or not (root / png).exists()):
                safe_mkdir(check_inside(root / png, root).parent, root)
                draw(pd.read_csv(root / data), root / png)
                changed.append(png)
    return changed


def draw_boxes(runs: pd.DataFrame, path: Path) -> None:
    """`figures.boxes_figure` of `pooled.attribution_runs`' table (read back from its CSV) at `path`."""
    from mecheval.report.figures import boxes_figure, colours
    from pages.study_figure import save_figure

    save_figure(boxes_figure(runs, colours(list(dict.fromkeys(runs["arch"]))), published_medians(runs)), path)


def draw_widths(table: pd.DataFrame, path: Path) -> None:
    """`widths.width_figure` of a `width_table` (read back from its CSV) as an optimised PNG at `path`."""
    from mecheval.report.figures import colours
    from pages.study_figure import save_figure
    from mecheval.report.widths import width_figure

    save_figure(width_figure(table, colours(list(dict.fromkeys(table["arch"])))), path)
