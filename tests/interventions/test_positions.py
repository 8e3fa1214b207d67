"""Positions as roles, role offsets and integers (`interventions.positions`), in the API and the CLI."""

from __future__ import annotations

import pytest
import torch

from mecheval.interventions import interchange, patch_all_positions, resolve_positions
from mecheval.interventions.positions import parse
from tests.interventions.handbuilt import induction_lm


def test_parse_specs():
    assert parse("key+3") == [("key", 3)] and parse("value-1") == [("value", -1)] and parse("query") == [("query", 0)]
    assert parse(5) == parse("5") == [(None, 5)]
    assert parse("key+1&query") == [("key", 1), ("query", 0)]
    for bad in ("key+", "-1", "key*2", "", -2):
        with pytest.raises(ValueError, match="position"):
            parse(bad)


def test_resolve_offsets_and_integers(ar_task):
    batch = ar_task.sample(16, seed=0)
    where = resolve_positions(batch, ["key+1", "value-1", "query", "key&query"])
    assert torch.equal(where["key+1"], batch.roles["value"]) and torch.equal(where["value-1"], batch.roles["key"])
    assert where["key&query"].shape == (16, 2)
    numbers = resolve_positions(batch, [0, "3"])
    assert list(numbers) == [0, 3] and torch.equal(numbers[3], torch.full((16,), 3))
    assert list(resolve_positions(batch, ["query", 2])) == ["query", "2"]  # mixed: strings
    T = batch.tokens.shape[1]
    with pytest.raises(ValueError, match=f"outside the sequence .0 … {T - 1}. in 16 of 16"):
        resolve_positions(batch, [T])
    with pytest.raises(ValueError, match="are not roles of this batch"):
        resolve_positions(batch, ["answer+1"])


def test_an_offset_patches_the_same_cells_as_the_role_it_lands_on(ar_task):
    """On AR the value follows its key: key+1 is the value position, cell for cell."""
    batch = ar_task.sample(48, seed=1)
    lm = induction_lm(ar_task.vocab_size, batch.tokens.shape[1])
    df = interchange(lm, ar_task, batch, "key", ["resid_pre"], ["value", "key+1"], subsets=None)
    at = df.pivot_table(index="layer", columns="position", values="attrib")
    assert at["key+1"].to_numpy() == pytest.approx(at["value"].to_numpy(), abs=1e-12)
    assert at["value"].abs().max() > 0.5  # not vacuous


def test_every_position_table_has_integer_positions(ar_task):
    batch = ar_task.sample(8, seed=2)
    lm = induction_lm(ar_task.vocab_size, batch.tokens.shape[1])
    df = patch_all_positions(lm, ar_task, batch, "key", ["layers.1.resid_pre"])
    assert df["position"].dtype.kind == "i"
    pivot = df.pivot_table(index="layer", columns="position", values="attrib")
    assert list(pivot.columns) == sorted(pivot.columns) == list(range(batch.tokens.shape[1]))
