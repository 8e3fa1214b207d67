"""A study's report as data: `analyse(load(dir))` returns its tables, checked here without rendering, and
`render` only formats them (the committed quick study: attention, Mamba and Mamba without its conv, 3 seeds)."""

import dataclasses
import re
from pathlib import Path

import pandas as pd
import pytest

from mecheval.report.analyse import Tables, analyse, load
from mecheval.report.build import render

QUICK = Path(__file__).resolve().parents[2] / "results" / "cpu" / "quick"


@pytest.fixture(scope="module")
def tables() -> Tables:
    if not QUICK.exists():
        pytest.skip("the committed quick study is not in this checkout")
    return analyse(load(QUICK))


def test_the_summary_is_one_row_per_architecture_beside_the_published_values(tables):
    summary = tables.summary.set_index("arch")
    assert list(summary.index) == ["mamba (d_conv 0)", "attention", "mamba"] and set(summary["seeds"]) == {3}
    assert summary.at["mamba", "verdict"] == "direct retrieval" and summary.at["mamba", "agree"] == "agree"
    assert summary.at["attention", "agree"] == "differ"  # its seeds 1 and 2 are positional pointers
    assert summary.at["mamba", "published_acc"] == 258 / 320  # exact: the study's 80.62%


def test_the_findings_are_outcomes(tables):
    assert [o.status for _, o in tables.findings] == ["not reproduced", "reproduced", "reproduced", "reproduced"]
    assert tables.left_out == 0


def test_the_further_tables_hold_numbers_per_group_or_run(tables):
    seeds = tables.seeds.set_index("arch")
    assert (seeds["seeds"] == 3).all() and seeds.at["mamba", "acc_min"] <= seeds.at["mamba", "acc_max"]
    assert pd.isna(seeds.at["mamba (d_conv 0)", "value_mean"])  # no seed learned: no attribution to average
    assert tables.widths is None and tables.fit.empty and tables.over_training.empty  # one width, no such readouts
    assert set(tables.states["arch"]) == {"mamba"} and set(tables.formed) == {"mamba"}
    assert set(tables.paired["vs"]) == {"attention"} and len(tables.artefact) == 9  # one row per best-lr run


def test_render_formats_the_tables_it_is_given(tables, tmp_path):
    report = render(dataclasses.replace(tables, study=dataclasses.replace(tables.study, dir=tmp_path)))
    text = re.sub(" +", " ", report.markdown.read_text())  # the table's cells without their padding
    mamba = tables.seeds.set_index("arch").loc["mamba"]
    assert f"| mamba | 64 | 0.003 | 3 | {mamba['acc_mean']:.3g} | {mamba['acc_std']:.3g} |" in text
    assert report.findings == tables.findings and report.summary is tables.summary
    assert pd.read_csv(tmp_path / "summary.csv").shape == tables.summary.shape
