"""A study's table joins each run's config to its verdict.json: no verdict field may shadow a config column."""

from pathlib import Path

from mecheval.interventions.runs import PROMPT_FIELDS
from mecheval.report.results import study_table
from mecheval.sweeps.table import collect, config_columns

MAIN_JOB = Path(__file__).resolve().parents[2] / "results" / "cpu" / "quick-main"  # seeds 0, 1, 2, read with seed 0


def test_each_run_keeps_its_training_seed_beside_the_seed_its_readout_drew_examples_with():
    table = study_table(MAIN_JOB)
    assert sorted(table["seed"]) == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # was all 0: the readout's seed replaced it
    assert set(table["read_seed"]) == {0}
    assert not set(PROMPT_FIELDS) & set(config_columns(collect(MAIN_JOB)))
