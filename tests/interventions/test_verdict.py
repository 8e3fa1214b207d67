"""Mechanism verdicts: hand-built models with known circuits, and the rules on synthetic tables."""

from __future__ import annotations

import pandas as pd
import pytest

from mecheval.interventions import interchange, mechanism
from tests.interventions.handbuilt import induction_lm, query_retrieval_lm


@pytest.fixture(scope="module")
def batch(ar_task):
    return ar_task.sample(128, seed=5, split="test")


def _table(lm, task, batch):
    return interchange(lm, task, batch, "key", ["resid_pre"], ["key", "value", "query"], seed=3)


def test_handbuilt_models_solve_the_task(ar_task, batch):
    for build in (induction_lm, query_retrieval_lm):
        lm = build(ar_task.vocab_size, batch.tokens.shape[1])
        assert (lm(batch.tokens, positions=batch.answer_pos).argmax(-1) == batch.answer).all()


def test_induction_model_gets_induction(ar_task, batch):
    lm = induction_lm(ar_task.vocab_size, batch.tokens.shape[1])
    v = mechanism(_table(lm, ar_task, batch))
    assert v.label == "induction"
    assert v.layer == 1 and v.effect > 0.9
    assert v.attrib_value == pytest.approx(1, abs=1e-3)
    assert v.attrib_query == pytest.approx(0, abs=1e-3) and v.attrib_key == pytest.approx(0, abs=1e-3)


def test_query_retrieval_model_gets_direct_retrieval(ar_task, batch):
    lm = query_retrieval_lm(ar_task.vocab_size, batch.tokens.shape[1])
    df = _table(lm, ar_task, batch)
    v = mechanism(df)
    assert v.label == "direct retrieval"
    assert v.layer == 2 and v.attrib_query == pytest.approx(1, abs=1e-3)
    assert v.attrib_value == pytest.approx(0, abs=1e-3)
    # Read at layer 1's input instead, the same model shows its induction step.
    assert mechanism(df, layer=1).label == "induction"


def _synthetic(key: float, value: float, query: float, p_clean: float = 0.9, p_corrupt: float = 0.1) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "corrupt": "key", "direction": "sufficiency", "layer": 1, "site": "resid_pre",
            "position": ["key", "value", "query"], "attrib": [key, value, query],
            "p_clean": p_clean, "p_corrupt": p_corrupt,
        }
    )


@pytest.mark.parametrize(
    "attribs, label",
    [
        ((0.0, 0.95, 0.05), "induction"),
        ((0.0, 0.1, 0.9), "direct retrieval"),
        ((0.5, 0.0, 0.5), "direct retrieval"),  # split between key and query, as Mamba's
        ((0.0, 0.5, 0.5), "mixed"),
        ((0.0, 0.9, 0.5), "mixed"),
    ],
)
def test_rules(attribs, label):
    assert mechanism(_synthetic(*attribs)).label == label


def test_not_learned_and_thresholds_are_parameters():
    assert mechanism(_synthetic(0, 1, 0, p_clean=0.105, p_corrupt=0.1)).label == "not learned"
    assert mechanism(_synthetic(0, 1, 0, p_clean=0.105, p_corrupt=0.1), min_effect=0.001).label == "induction"
    assert mechanism(_synthetic(0, 0.7, 0.1)).label == "mixed"
    assert mechanism(_synthetic(0, 0.7, 0.1), high=0.6).label == "induction"
    with pytest.raises(ValueError, match="no sufficiency rows"):
        mechanism(_synthetic(0, 1, 0), corrupt="value")
