"""The conv-reach artefact split: which queried pairs the answer position sees through short convs alone,
and interchange tables split by it (the same numbers as running on the sub-batch)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from mecheval.interventions import interchange
from mecheval.interventions.accuracy import accuracy_table
from mecheval.interventions.artefact import conv_reach, inside_reach, key_distance, subsets
from mecheval.models import ModelConfig, build_model


def lm_with(mixer: str, d_conv, vocab: int):
    torch.manual_seed(0)
    return build_model(ModelConfig(mixer=mixer, d_conv=d_conv, vocab_size=vocab, d_model=16, n_layers=2)).eval()


@pytest.mark.parametrize("mixer, d_conv, reach", [("mamba", 4, 6), ("mamba", 3, 4), ("mamba", 0, 0),
                                                   ("attention", 0, 0), ("baseconv", [3, "long"], 2)])
def test_reach_is_the_sum_of_short_kernels_minus_one(ar_task, mixer, d_conv, reach):
    assert conv_reach(lm_with(mixer, d_conv, ar_task.vocab_size)) == reach


def test_ar_last_two_pairs_are_inside_a_two_layer_kernel_4_reach(ar_task):
    batch = ar_task.sample(256, seed=1, split="test")
    dist = key_distance(batch)
    n_pairs = 4  # the fixture's AR task
    assert set(dist.tolist()) == {3 + 2 * j for j in range(n_pairs)}  # the last pair's key is 3 before the query
    inside = inside_reach(lm_with("mamba", 4, ar_task.vocab_size), batch)
    assert torch.equal(inside, dist <= 6)
    assert not inside_reach(lm_with("attention", 0, ar_task.vocab_size), batch).any()


def test_subset_rows_equal_the_interchange_of_the_sub_batch(ar_task):
    lm = lm_with("mamba", 4, ar_task.vocab_size)
    batch = ar_task.sample(96, seed=2, split="test")
    masks = subsets(lm, batch)
    split = interchange(lm, ar_task, batch, "key", ["resid_pre"], ["key", "value", "query"], seed=4, subsets=masks, n_boot=20)
    assert set(split["subset"]) == {"all", "outside", "inside"}
    # the corruption is drawn per example from the seed, so the sub-batch is corrupted the same way only if
    # drawn alike; compare instead the per-example means the subsets are built from
    per = interchange(lm, ar_task, batch, "key", ["resid_pre"], ["key", "value", "query"], seed=4, per_example=True)
    outside = masks["outside"].numpy()
    for (layer, pos), part in per.groupby(["layer", "position"]):
        row = split[(split["subset"] == "outside") & (split["layer"] == layer) & (split["position"] == pos)].iloc[0]
        kept = part[outside[part["example"].to_numpy()]]
        assert row["n"] == len(kept)
        assert row["p_patched"] == pytest.approx(kept["p_patched"].mean(), abs=1e-12)
        assert row["p_clean"] == pytest.approx(kept["p_clean"].mean(), abs=1e-12)


def test_accuracy_table_counts_every_example_once(ar_task):
    lm = lm_with("mamba", 4, ar_task.vocab_size)
    batch = ar_task.sample(200, seed=3, split="test")
    table = accuracy_table(lm, batch, subsets(lm, batch)).set_index("subset")
    assert table.at["all", "n"] == 200 == table.at["outside", "n"] + table.at["inside", "n"]
    dist = table[table.index.str.startswith("distance")]
    assert dist["n"].sum() == 200
    weighted = (dist["acc"] * dist["n"]).sum() / 200
    assert weighted == pytest.approx(table.at["all", "acc"], abs=1e-12)
    assert (table["acc_lo"] <= table["acc"]).all() and (table["acc"] <= table["acc_hi"]).all()
    assert isinstance(table, pd.DataFrame)
