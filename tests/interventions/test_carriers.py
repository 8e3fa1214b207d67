"""The full-window readout: every position that can carry the key, singly and jointly, on hand-built models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mecheval.interventions import interchange, mechanism
from mecheval.interventions.artefact import distance_subsets, subsets
from mecheval.interventions.carriers import CARRIERS, OTHERS, PUBLISHED, WINDOW, carrier_positions, carriers_table, read_kernel
from mecheval.interventions.verdict import positions_words
from mecheval.tasks import make_task
from tests.interventions.handbuilt import carried_key_lm, induction_lm


@pytest.fixture(scope="module")
def batch(ar_task):
    return ar_task.sample(128, seed=5, split="test")


def test_positions_cover_the_window_sep_and_query_and_nothing_past_the_answer(ar_task, batch):
    where = carrier_positions(batch, kernel=4)
    key, value, sep, query = (batch.roles[r] for r in ("key", "value", "sep", "query"))
    assert list(where) == ["key", "value", "value+1", "value+2", "value+3", "sep", "query", PUBLISHED, WINDOW, CARRIERS, OTHERS]
    inside = value + 3 <= batch.answer_pos
    assert torch.equal(where["value+3"], torch.where(inside, value + 3, key - 1))  # past the answer: a no-op position
    assert torch.equal(where[PUBLISHED], torch.stack([key, value, query], 1))
    assert torch.equal(where[CARRIERS][:, -2:], torch.stack([sep, query], 1))
    for b in range(len(batch)):  # `others`: every position strictly between key and answer not in a carrier, else key - 1
        free = set(range(int(key[b]) + 1, int(batch.answer_pos[b]))) - set(where[CARRIERS][b].tolist())
        assert set(where[OTHERS][b].tolist()) - {int(key[b]) - 1} == free
    atr = make_task("atr", grammar="easy").sample(64, seed=0, split="test")  # the value may lie several positions after the key
    key, value = atr.roles["key"], atr.roles["value"]
    where = carrier_positions(atr, kernel=3)
    assert [k for k in where if k.startswith("key+")] == ["key+1", "key+2"]
    assert torch.equal(where["key+2"], torch.where(key + 2 < value, key + 2, key - 1))
    with pytest.raises(ValueError, match="single-answer"):
        carrier_positions(make_task("mqar", n_pairs=4).sample(4, seed=0), kernel=4)


def test_the_full_window_finds_a_key_the_published_cells_miss(ar_task, batch):
    """Hand-built: the key reaches the read point only at value + 1. The published three read 0, singly and
    jointly; the full window finds value + 1 (≈ 1) and reads direct retrieval where the published cells read mixed."""
    lm = carried_key_lm(ar_task.vocab_size)
    assert (lm(batch.tokens, positions=batch.answer_pos).argmax(-1) == batch.answer).all()
    assert read_kernel(lm, "resid_pre", 1) == 3 and read_kernel(lm, "conv_out", 0) == 1
    table = interchange(lm, ar_task, batch, "key", ["resid_pre"], ["key", "value", "query", "key&query"], seed=3)
    carriers = carriers_table(lm, ar_task, batch, "key", "resid_pre", 1, seed=3)
    at = carriers[carriers["subset"] == "outside"].set_index("position")["attrib"]  # the rows `mechanism` reads
    assert at["value+1"] == pytest.approx(1, abs=1e-3) and at[CARRIERS] == pytest.approx(1, abs=1e-3)
    for cell in ("key", "value", "query", PUBLISHED, OTHERS):
        assert abs(at[cell]) < 1e-3, cell
    assert mechanism(table).label == "mixed"
    v = mechanism(table, carriers=carriers)
    assert v.label == "direct retrieval" and "@value+1 1.00" in v.detail
    assert "key, value, query together restore 0.00" in v.detail
    assert v.window[PUBLISHED][0] == pytest.approx(0, abs=1e-3) and v.as_row()["window@value+1"] == pytest.approx(1, abs=1e-3)


def test_on_an_induction_model_the_published_three_explain_the_effect(ar_task, batch):
    lm = induction_lm(ar_task.vocab_size, batch.tokens.shape[1])
    table = interchange(lm, ar_task, batch, "key", ["resid_pre"], ["key", "value", "query"], seed=3)
    carriers = carriers_table(lm, ar_task, batch, "key", "resid_pre", 1, seed=3)
    v = mechanism(table, carriers=carriers)
    assert v.label == "induction"
    assert v.window[PUBLISHED][0] == pytest.approx(1, abs=1e-3) and v.window[CARRIERS][0] == pytest.approx(1, abs=1e-3)
    assert list(carriers["position"])[:3] == ["key", "value", "sep"]  # attention: no conv, the window is key and value


QUICK_MAMBA = Path(__file__).parents[2] / "results/cpu/quick/runs/preset-mamba_lr-0.003_seed-0"


@pytest.mark.skipif(not QUICK_MAMBA.exists(), reason="the committed cpu-scale quick study is not in this checkout")
def test_on_the_trained_quick_mamba_the_window_explains_what_the_published_three_miss():
    """The committed quick Mamba (d_conv 4, seed 0) at layer 1's input, by the queried key's distance: the
    published three together explain less of the effect the farther the pair (the key's information spreads
    over key … value+3), every carrier together all of it, the other positions nothing; at distance 3 (inside
    the control's reach) the query alone holds the answer."""
    from mecheval import load_run

    lm, task, _ = load_run(QUICK_MAMBA)
    batch = task.sample(256, seed=11, split="test")
    df = carriers_table(lm, task, batch, "key", "resid_pre", 1, seed=1, n_boot=200,
                        subsets=subsets(lm, batch) | distance_subsets(batch))
    at = df.pivot_table(index="position", columns="subset", values="attrib")
    lo = df.pivot_table(index="position", columns="subset", values="attrib_lo")
    assert at.at["query", "distance 3"] > 0.95
    assert at.at[PUBLISHED, "distance 9"] < at.at[PUBLISHED, "distance 5"] and at.at[PUBLISHED, "distance 9"] < 0.85
    for subset in ("outside", "distance 5", "distance 7", "distance 9"):
        assert lo.at[CARRIERS, subset] > 0.95 and abs(at.at[OTHERS, subset]) < 0.05, subset


def test_a_long_window_reads_as_ranges_and_a_short_one_in_full():
    """A long conv's window (H3 on ATR: value … value+1023) reads as ranges; runs of up to four, and a gap, stay spelled."""
    long = ["key", *(f"key+{i}" for i in range(1, 18)), "value", *(f"value+{i}" for i in range(1, 1024)), "sep", "query"]
    assert positions_words(long) == "key … key+17, value … value+1023, sep, query"
    assert positions_words(["key", "value", "value+1", "value+2", "value+3"]) == "key, value, value+1, value+2, value+3"
    assert positions_words(["key", "key+2", "key+3", "key+4", "key+5", "key+6"]) == "key, key+2 … key+6"
