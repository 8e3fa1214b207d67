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
    protocol    the published reading (the maximum over the study's swept rates of one run's accuracy on 320 test
                examples) simulated from our runs, per cell of `task=` (`grammar=`): how often it reaches the
                published value (`protocol.py`)
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
Each kind's body comes from a module of its own: `findings_blocks` (findings, checks, rounding), `study_blocks`
(studies, widths, modern), `pool_blocks` (pooled), `overview_blocks` (rates, coverage, costs, prompts, pointers,
design) and `published_blocks` (published, measured, figure), on what `base` shares (the pages, the committed
studies, the selection below, the Markdown); this module dispatches them (`BLOCKS`).
`write_pages(root)` fills every block and draws the figures (their numbers in docs/figures/study.csv, per
study spanning several widths docs/figures/widths/SCALE-NAME.csv, per pool docs/figures/pooled/NAME*.csv);
`stale_pages(root)` names what differs from the files now (the test that keeps the pages true).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from mecheval.common import atomic_write_text, check_inside, safe_mkdir
from mecheval.training.lock import DirLock
from pages.base import BLOCK, PageError, block_specs, markdown_table, matches, pages, parse_spec, studies
from pages.findings_blocks import checks_block, findings_block, rounding_rows
from pages.overview_blocks import (RATES_DATA, RATES_PNG, cost_rows, coverage_block, design_rows, draw_rates,
                                   pointer_rows, prompt_rows, protocol_block, rates_block, rates_data)
from pages.pool_blocks import POOL_FIGURES, draw_boxes, pool_data, pool_files, pool_name, pooled_block
from pages.published_blocks import (FIGURE_DATA, FIGURE_PNGS, figure_block, figure_tables, measured_block,
                                    published_block)
from pages.study_blocks import draw_widths, modern_block, studies_block, width_files, widths_block, widths_data


def _index(root: Path) -> dict[Path, Path]:
    """study -> the docs page whose `studies` block shows it (the first such page)."""
    index: dict[Path, Path] = {}
    for page, args in block_specs(root, "studies"):
        if page.name == "README.md":
            continue
        for s in studies(root):
            if matches(root, s, args):
                index.setdefault(s, page)
    return index


# kind -> its body from (root, the block's arguments, the page, study -> the page showing it)
BLOCKS: dict[str, Callable[[Path, dict[str, str], Path, dict[Path, Path]], str]] = {
    "findings": findings_block,
    "checks": checks_block,
    "measured": lambda root, args, page, index: measured_block(args, page),
    "studies": lambda root, args, page, index: studies_block(root, args, page),
    "published": lambda root, args, page, index: published_block(args, page),
    "figure": lambda root, args, page, index: figure_block(root, args, page),
    "widths": lambda root, args, page, index: widths_block(root, args, page),
    "pooled": lambda root, args, page, index: pooled_block(root, args, page),
    "costs": lambda root, args, page, index: markdown_table(cost_rows(root, args, page)),
    "rounding": lambda root, args, page, index: markdown_table(rounding_rows(root, args, page)),
    "rates": lambda root, args, page, index: rates_block(root, page, index),
    "coverage": lambda root, args, page, index: coverage_block(root),
    "protocol": lambda root, args, page, index: protocol_block(root, args, page),
    "prompts": lambda root, args, page, index: markdown_table(prompt_rows(root)),
    "pointers": lambda root, args, page, index: markdown_table(pointer_rows(root)),
    "modern": lambda root, args, page, index: modern_block(root, args, page),
    "design": lambda root, args, page, index: markdown_table(design_rows(root, args, page)),
}


def render(root: Path, page: Path, spec: str, index: dict[Path, Path]) -> str:
    """The body of one generated block of `page` (`BLOCKS`)."""
    kind, args = parse_spec(spec, page)
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
    out[FIGURE_DATA] = figure_data(figure_tables(root)).to_csv(index=False, float_format="%.4f")
    rates = rates_data(root)
    if len(rates):
        studies_in_words = rates["studies"].map(lambda paths: " ".join(map(str, paths)))  # a CSV cell: space-separated
        out[RATES_DATA] = rates.drop(columns="finals").assign(studies=studies_in_words).to_csv(index=False, float_format="%.4f")
    for study in studies(root):
        table = widths_data(root, study)
        if table is not None:
            out[width_files(study)[0]] = table.to_csv(index=False, float_format="%.4f")
    for page, args in block_specs(root, "pooled"):
        for figure, table in pool_data(root, args, page)[2].items():
            out[pool_files(pool_name(args, page), figure)[0]] = table.to_csv(index=False, float_format="%.4f")
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
            + [(*pool_files(pool_name(args, page), figure), draw_widths if figure == "widths" else draw_boxes)
               for page, args in block_specs(root, "pooled") for figure in POOL_FIGURES])


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
