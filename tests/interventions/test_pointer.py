"""The pointer control tells a query that carries the answer from one that carries only where it is."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from mecheval.interventions import mechanism
from mecheval.interventions.pointer import pointer_control
from mecheval.interventions.verdict import carries
from mecheval.tasks import make_task
from tests.interventions.handbuilt import key_readout, pointer_lm, query_retrieval_lm


@pytest.fixture(scope="module")
def batch(handbuilt_batch):
    return handbuilt_batch


def test_pointer_model_reads_as_direct_retrieval_without_the_control(ar_task, batch):
    lm = pointer_lm(ar_task.vocab_size, batch.tokens.shape[1])
    assert (lm(batch.tokens, positions=batch.answer_pos).argmax(-1) == batch.answer).all()
    v = mechanism(key_readout(lm, ar_task, batch))
    assert v.label == "direct retrieval" and v.attrib_query == pytest.approx(1, abs=1e-3)
    assert v.attrib_value == pytest.approx(0, abs=1e-3) and v.detail.endswith("pointer control not run")


def test_pointer_model_is_labelled_a_positional_pointer(ar_task, batch):
    lm = pointer_lm(ar_task.vocab_size, batch.tokens.shape[1])
    control = pointer_control(lm, ar_task, batch, "resid_pre", 1)
    row = control.iloc[0]
    assert row["n"] == len(batch) and row["position"] == 1.0 and row["answer"] == 0.0
    assert carries(row) == "position"
    v = mechanism(key_readout(lm, ar_task, batch), pointer=control)
    assert v.label == "positional pointer" and "not the answer" in v.detail


def test_query_that_holds_the_answer_keeps_direct_retrieval(ar_task, batch):
    """The 3-layer model read at its last layer's input: the answer itself sits at the query."""
    lm = query_retrieval_lm(ar_task.vocab_size, batch.tokens.shape[1])
    control = pointer_control(lm, ar_task, batch, "resid_pre", 2)
    assert control.iloc[0]["answer"] == 1.0 and carries(control.iloc[0]) == "answer"
    v = mechanism(key_readout(lm, ar_task, batch), layer=2, pointer=control)
    assert v.label == "direct retrieval" and "the query carries the answer" in v.detail


def test_an_undecided_control_leaves_the_label_inconclusive(ar_task, batch):
    lm = pointer_lm(ar_task.vocab_size, batch.tokens.shape[1])
    undecided = pd.DataFrame([{"layer": 1, "site": "resid_pre", "n": 10, "acc_moved": 1.0, "answer": 0.5,
                               "answer_lo": 0.24, "answer_hi": 0.76, "position": 0.5, "position_lo": 0.24,
                               "position_hi": 0.76}])
    assert carries(undecided.iloc[0]) is None
    assert mechanism(key_readout(lm, ar_task, batch), pointer=undecided).label == "inconclusive"
    neither = undecided.assign(answer=0.1, answer_hi=0.3, position=0.1, position_hi=0.3).iloc[0]
    assert carries(neither) == "neither"


def test_ar_move_keeps_the_answer_and_changes_the_slot(ar_task, batch):
    moved, old = ar_task.move(batch, seed=1)
    rows = torch.arange(len(batch))
    assert torch.equal(moved.answer, batch.answer) and torch.equal(old, batch.roles["value"])
    assert (moved.roles["key"] != batch.roles["key"]).all() and ar_task.answer_derivable(moved).all()
    assert torch.equal(moved.tokens[rows, moved.roles["value"]], batch.answer)
    assert (moved.tokens[rows, old] != batch.answer).all()
    assert torch.equal(moved.tokens.sort(1).values, batch.tokens.sort(1).values)  # the same tokens, moved


def test_atr_move_shifts_the_context_and_keeps_the_answer():
    task = make_task("atr", grammar="easy")
    batch = task.sample(64, seed=0, split="test")
    moved, old = task.move(batch, seed=0)
    rows = torch.arange(len(batch))
    assert task.answer_derivable(moved).all() and torch.equal(moved.answer, batch.answer)
    assert int(moved.lengths.max()) <= batch.tokens.shape[1]
    for role in ("key", "value", "query"):
        assert torch.equal(moved.tokens[rows, moved.roles[role]], batch.tokens[rows, batch.roles[role]])
    shifted = moved.roles["value"] != old
    assert shifted.float().mean() > 0.5  # most examples fit a filler
