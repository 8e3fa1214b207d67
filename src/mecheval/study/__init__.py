"""Named studies that reproduce the published findings: sweep + interventions + report."""

from mecheval.study.presets import SCALES, STUDIES, Study
from mecheval.study.run import run_study

__all__ = ["SCALES", "STUDIES", "Study", "run_study"]
