"""Reports: a study's tables and figures beside the published results (report.md, report.html)."""

from mecheval.report.build import Report, build_report

__all__ = ["Report", "build_report"]
