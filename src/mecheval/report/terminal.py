"""The report's summary for the terminal (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from mecheval.interventions.verdict import shows_attributions
from mecheval.report.build import GRAMMAR, Report
from mecheval.report.decide import AGREE, DIFFER, INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from mecheval.report.overview import with_interval

STYLE = {AGREE: "green", DIFFER: "red", INCONCLUSIVE: "yellow", REPRODUCED: "green", NOT_REPRODUCED: "red"}


def _num(v, fmt: str = "{:.2f}") -> str:
    return "-" if v is None or v != v else fmt.format(v)


def _text(v) -> str:
    return v if isinstance(v, str) else "-"


def _ci(r, col: str) -> str:
    """`0.98 [0.96, 0.99]`: a value with its 95% interval (the report's formatter)."""
    return with_interval(r.get(col), r.get(f"{col}_lo"), r.get(f"{col}_hi"))


def print_summary(report: Report, console: Console | None = None) -> None:
    """One row per (architecture, width[, grammar]): accuracy (with the task's chance accuracy) and verdict
    beside the published ones, whether they agree, and the attributions (`–` where the run did not learn);
    the grammar, seed count, held-out accuracy and formed-at columns appear where the study has them;
    each verdict's detail follows the table, one line per row."""
    summary = report.summary
    columns = [  # (header, cell, is text, shown)
        ("arch", lambda r: r["arch"], True, True),
        ("grammar", lambda r: _text(r.get(GRAMMAR)), True, GRAMMAR in summary),
        ("d", lambda r: str(r["model.d_model"]), False, True),
        ("lr", lambda r: _num(r["optim.lr"], "{:g}"), False, True),
        ("seeds", lambda r: str(r["seeds"]), False, summary["seeds"].max() > 1),
        ("acc", lambda r: _num(r["acc"]), False, True),
        ("chance", lambda r: _num(r.get("chance")), False, "chance" in summary),
        ("acc outside", lambda r: _ci(r, "acc_outside"), False, "acc_outside" in summary),
        ("heldout", lambda r: _num(r.get("acc_heldout")), False, "acc_heldout" in summary),
        ("pub acc", lambda r: _num(r["published_acc"]), False, True),
        ("verdict", lambda r: _text(r["verdict"]), True, True),
        ("pub verdict", lambda r: _text(r["published_verdict"]), True, True),
        ("agrees", lambda r: f"[{STYLE[r['agree']]}]{r['agree']}[/]" if r["agree"] in STYLE else "", True, True),
        *((f"@{pos}", lambda r, pos=pos: _num(r[f"attrib@{pos}"]) if shows_attributions(r["verdict"]) else "–", False, True)
          for pos in ("key", "value", "query")),
        ("formed at", lambda r: _text(r.get("formed_at")), False, "formed_at" in summary),
    ]
    columns = [c for c in columns if c[3]]
    table = Table(title=f"{report.html.parent.name}: best learning rate per architecture (ours | published); "
                        "attributions on the examples outside the conv reach")
    for header, _, text, _ in columns:
        table.add_column(header, justify="left" if text else "right", no_wrap=text, min_width=len(header))
    for _, r in summary.iterrows():
        table.add_row(*(cell(r) for _, cell, _, _ in columns))
    console = console or Console()
    if not console.is_terminal:  # a pipe or a log: no width to fit, print the table whole
        console.width = max(console.width, 200)
    console.print(table)
    if "detail" in summary:  # the verdict's detail, one line per row (too long for a column)
        for _, r in summary.iterrows():
            if isinstance(r.get("detail"), str):
                console.print(f"{r['arch']}: {r['detail']}", soft_wrap=not console.is_terminal, highlight=False)
    if report.overview:  # the same paragraph as the report's summary
        console.print(report.overview, soft_wrap=not console.is_terminal, highlight=False)
    for claim, outcome in report.findings:  # each finding's outcome, its parts and the share of seeds reproducing it
        style = STYLE.get(outcome.status, "default")
        console.print(f"[{style}]{outcome.words()}[/]: {claim}", soft_wrap=not console.is_terminal, highlight=False)
    console.print(f"report: {report.html}  {report.markdown}")
