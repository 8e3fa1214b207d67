"""docs/verdicts.md states numbers about the committed quick study: each is read here from `results/` (its
rounding table is a generated block: tests/report/test_pages.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).parents[1]
DOC = ROOT / "docs/verdicts.md"
RUN = ROOT / "results/cpu/quick/runs/preset-mamba_lr-0.003_seed-0"

pytestmark = pytest.mark.skipif(not (RUN / "carriers.parquet").exists(), reason="the committed quick study is not in this checkout")


def test_the_quoted_verdict_detail_is_the_committed_one():
    text = DOC.read_text()
    quoted = re.search(rf"<!-- verdict-detail: {re.escape(str(RUN.relative_to(ROOT)))} -->\n> (.+)\n", text).group(1)
    verdict = json.loads((RUN / "verdict.json").read_text())
    assert quoted == verdict["detail"]
    assert f"seed 0 ({verdict['n']}\nexamples outside the conv reach" in text


def test_the_numbers_by_distance_are_the_committed_ones():
    text = " ".join(DOC.read_text().split())
    at = pd.read_parquet(RUN / "carriers.parquet").pivot_table(index="position", columns="subset", values="attrib")
    f = lambda cell, subset: f"{at.at[cell, subset]:.2f}"  # noqa: E731
    assert f"@key is {f('key', 'distance 5')} for the pair second from the end (distance 5) and {f('key', 'distance 9')} for the first pair (distance 9)" in text
    assert f"restore {f('key&value&query', 'distance 5')} and {f('key&value&query', 'distance 9')} of the effect" in text
    assert f"reads @query {f('query', 'distance 3')}" in text and f"(@key {f('key', 'distance 5')})" in text
    assert f"The published three explain {f('key&value&query', 'outside')} of the effect" in text


def test_what_the_main_jobs_findings_rest_on_is_what_the_three_seeds_show():
    from mecheval.report.analyse import study_findings

    found = {f: o.status for f, o in study_findings(ROOT / "results/cpu/quick").items()}
    assert found == {"attention_induction": "not reproduced", "mamba_direct": "reproduced",
                     "mamba_conv_forms": "reproduced", "mamba_noconv_fails": "reproduced"}
    verdicts = {s: json.loads((ROOT / f"results/cpu/quick/runs/preset-attention_lr-0.003_seed-{s}/verdict.json").read_text())["verdict"]
                for s in range(3)}
    assert verdicts == {0: "induction", 1: "positional pointer", 2: "positional pointer"}
    text = " ".join(DOC.read_text().split())
    assert ("attention reads induction in seed 0 only: seeds 1 and 2 are positional pointers (the pointer control "
            "above), while the three Mamba findings hold in every seed") in text


AT_CHANCE = ROOT / "results/paper-d32/ar-mamba-conv-lr3e-2/runs/build-study_d_conv-2_d_model-32_preset-mamba_lr-0.03"


@pytest.mark.skipif(not AT_CHANCE.exists(), reason="the committed d = 32 Mamba conv study at 3e-2 is not in this checkout")
def test_the_model_at_chance_the_page_quotes_is_the_committed_one():
    """docs/verdicts.md quotes a run at chance whose small key effect the other rules would label: its numbers."""
    text = " ".join(DOC.read_text().split())
    verdict = json.loads((AT_CHANCE / "verdict.json").read_text())
    assert verdict["verdict"] == "not learned" and "not above chance" in verdict["detail"]
    assert (f"answers {verdict['acc_outside']:.2f} of the {verdict['n']} unseen test prompts read (chance 1/16) and its key "
            f"effect, {verdict['effect']:.2f},") in text


def test_every_committed_verdict_is_decided_by_the_current_rules():
    """No verdict of earlier rules is passed off as current: `mecheval relabel DIR` (or `land.sh`) brings each
    committed verdict.json to runs.VERDICT_RULES."""
    from mecheval.interventions.runs import VERDICT_RULES

    stale = [str(p.parent.relative_to(ROOT)) for p in sorted((ROOT / "results").rglob("verdict.json"))
             if json.loads(p.read_text()).get("rules") != VERDICT_RULES]
    assert not stale, f"{len(stale)} verdicts of earlier rules, e.g. {stale[:3]}: run `mecheval relabel STUDY_DIR`"
