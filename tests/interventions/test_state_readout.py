"""The state readout (`state_readout.state_curve`): what each layer's recurrent state carries."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mecheval.interventions.state_readout import COLUMNS, DENSE_OFFSETS, readout_offsets, state_curve, state_summary

from .test_engine import random_lm


def test_state_curve_covers_key_to_answer_on_the_examples_where_each_point_exists(ar_task):
    lm = random_lm(ar_task.vocab_size, mixer="mamba", n_layers=2)
    batch = ar_task.sample(32, seed=4)
    curve = state_curve(lm, ar_task, batch, n_boot=50)
    assert list(curve.columns[: len(COLUMNS)]) == COLUMNS
    assert set(curve["layer"]) == {0, 1} and set(curve["direction"]) == {"sufficiency", "necessity"}
    key, answer = batch.roles["key"], batch.answer_pos
    for (align, offset), part in curve.groupby(["align", "offset"]):
        pos = key + offset if align == "key" else answer + offset
        assert (part["n"] == int(((pos >= key) & (pos < answer)).sum())).all()
    assert curve[curve["align"] == "answer"]["offset"].max() == -1  # the state the answer's step starts from
    assert curve[curve["align"] == "key"]["offset"].min() == 0
    ok = curve.dropna(subset=["attrib"])
    assert (ok["attrib_lo"] <= ok["attrib"] + 1e-9).all() and (ok["attrib"] <= ok["attrib_hi"] + 1e-9).all()


def test_attention_has_no_state_and_gets_an_empty_table(ar_task):
    curve = state_curve(random_lm(ar_task.vocab_size), ar_task, ar_task.sample(8, seed=0))
    assert curve.empty and list(curve.columns) == COLUMNS


def test_summary_finds_where_the_association_enters_and_what_is_left_at_the_answer():
    rows = [{"layer": 1, "align": "key", "offset": o, "direction": "sufficiency", "attrib": a,
             "attrib_lo": a - 0.1, "attrib_hi": a + 0.1, "n": 100} for o, a in enumerate([0.0, 0.1, 0.6, 0.9, 0.8])]
    rows += [{"layer": 1, "align": "key", "offset": 40, "direction": "sufficiency", "attrib": 2.9,  # one example
              "attrib_lo": 2.9, "attrib_hi": 2.9, "n": 1}]  # that far from its key: no reading, not the peak
    rows += [{"layer": 1, "align": "answer", "offset": -1, "direction": "sufficiency", "attrib": 0.7,
              "attrib_lo": 0.6, "attrib_hi": 0.8, "n": 10}]
    shift = [{**r, "layer": 2, "attrib": a, "attrib_lo": a - 0.1, "attrib_hi": a + 0.1}  # held right after the
             for r, a in zip(rows, [0.8, 0.2, 0.5, 0.0, 0.0, 0.0, 0.0])]  # key alone: a later rise is not that run
    rows += [{**r, "layer": 0, "attrib": -0.01} for r in rows]  # a layer whose state restores nothing: left out
    s = state_summary(pd.DataFrame(rows + shift))
    assert s.to_dict("records") == [
        {"layer": 1, "enters": 2, "held": 4, "peak": 0.9, "peak_lo": 0.8, "peak_hi": 1.0,
         "last": 0.7, "last_lo": 0.6, "last_hi": 0.8, "last_n": 10},
        {"layer": 2, "enters": 0, "held": 0, "peak": 0.8, "peak_lo": pytest.approx(0.7),
         "peak_hi": pytest.approx(0.9), "last": 0.0, "last_lo": -0.1, "last_hi": 0.1, "last_n": 10}]


@given(first=st.integers(0, 3), extra=st.integers(0, 400))
def test_readout_offsets_read_every_near_offset_then_a_geometric_grid_up_to_the_farthest(first, extra):
    last = first + extra
    offsets = readout_offsets(first, last)
    assert offsets[0] == first and offsets[-1] == last and offsets == sorted(set(offsets))
    assert offsets[:DENSE_OFFSETS] == list(range(first, min(last, first + DENSE_OFFSETS - 1) + 1))
    assert len(offsets) <= DENSE_OFFSETS + 1 + math.ceil(math.log(max(last, 2), 1.5))
    assert all(b <= max(a + 1, round(a * 1.5)) for a, b in zip(offsets, offsets[1:]) if b != last)


def test_the_state_readout_is_written_into_the_run_directory(ar_task, tmp_path):
    """`write_state_readout` (what `intervene --analysis state` calls for a model that learned) writes the
    table and its figure into the run directory (a merge once named a variable it does not have)."""
    from mecheval.interventions.runs import write_state_readout

    lm = random_lm(ar_task.vocab_size, mixer="mamba", n_layers=2)
    curve = state_curve(lm, ar_task, ar_task.sample(8, seed=4), corrupt="key")
    write_state_readout(tmp_path, curve, "key", 8)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "state_curve.parquet"), curve)
    assert (tmp_path / "interventions" / "state_curve.png").stat().st_size > 1000
