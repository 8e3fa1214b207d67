"""Reports: a study's tables and figures beside the published results (report.md, report.html).
`build_report(dir)` is `render(analyse(load(dir)))`: `analyse` returns the study's `Tables`, `render` writes them."""

from mecheval.report.analyse import Tables, analyse, load
from mecheval.report.build import Report, build_report, render

__all__ = ["Report", "Tables", "analyse", "build_report", "load", "render"]
