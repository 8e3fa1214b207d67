"""Named studies that reproduce the published findings: sweep + interventions + report."""

from mecheval.study.presets import SCALES, STUDIES, Study

__all__ = ["SCALES", "STUDIES", "Study", "run_study"]


def __getattr__(name: str):
    # `run_study` imports the report, which imports this package's findings: load it on first use.
    if name == "run_study":
        from mecheval.study.run import run_study

        return run_study
    raise AttributeError(f"module 'mecheval.study' has no attribute {name!r}")
