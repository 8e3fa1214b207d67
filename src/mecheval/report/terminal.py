"""The report's summary for the terminal (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from mecheval.report.build import Report

STYLE = {"agree": "green", "disagree": "red"}


def print_summary(report: Report, console: Console | None = None) -> None:
    """One row per (architecture, width): accuracy and verdict beside the published ones."""
    table = Table(title=f"{report.html.parent.name}: best learning rate per architecture (ours | published)")
    heldout = "acc_heldout" in report.summary
    for col in ("arch", "d", "lr", "acc", *(["heldout"] if heldout else []), "pub acc", "verdict", "pub verdict", "",
                "@key", "@value", "@query"):
        text = col in ("arch", "verdict", "pub verdict", "")
        table.add_column(col, justify="left" if text else "right", no_wrap=text)

    def num(v, fmt="{:.2f}"):
        return "-" if v is None or v != v else fmt.format(v)

    for _, r in report.summary.iterrows():
        agree = r["agree"]
        table.add_row(
            r["arch"], str(r["model.d_model"]), num(r["optim.lr"], "{:g}"), num(r["acc"]),
            *([num(r["acc_heldout"])] if heldout else []), num(r["published_acc"]),
            *(v if isinstance(v, str) else "-" for v in (r["verdict"], r["published_verdict"])),
            f"[{STYLE[agree]}]{agree}[/]" if agree in STYLE else "",
            num(r["attrib@key"]), num(r["attrib@value"]), num(r["attrib@query"]),
        )
    console = console or Console()
    if not console.is_terminal:  # a pipe or a log: no width to fit, print the table whole
        console.width = max(console.width, 150)
    console.print(table)
    console.print(f"report: {report.html}  {report.markdown}")
