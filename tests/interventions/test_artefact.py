"""The conv-reach artefact split: which queried pairs the answer position sees through short convs alone,
and interchange tables split by it (the same numbers as running on the sub-batch)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from mecheval.interventions import interchange
from mecheval.interventions.accuracy import accuracy_table, correct_answers
from mecheval.interventions.artefact import conv_reach, inside_reach, key_distance, read_reach, subsets
from mecheval.models import ModelConfig, build_model


def lm_with(mixer: str, d_conv, vocab: int):
    torch.manual_seed(0)
    return build_model(ModelConfig(mixer=mixer, d_conv=d_conv, vocab_size=vocab, d_model=16, n_layers=2)).eval()


@pytest.mark.parametrize("mixer, d_conv, reach", [("mamba", 4, 6), ("mamba", 3, 4), ("mamba", 0, 0),
                                                   ("attention", 0, 0), ("baseconv", [3, "long"], 2)])
def test_reach_is_the_sum_of_short_kernels_minus_one(ar_task, mixer, d_conv, reach):
    assert conv_reach(lm_with(mixer, d_conv, ar_task.vocab_size)) == reach


def test_only_the_pairs_inside_the_reach_before_the_read_point_are_inside(ar_task):
    batch = ar_task.sample(256, seed=1, split="test")
    dist = key_distance(batch)
    n_pairs = 4  # the fixture's AR task
    assert set(dist.tolist()) == {3 + 2 * j for j in range(n_pairs)}  # the last pair's key is 3 before the query
    mamba = lm_with("mamba", 4, ar_task.vocab_size)
    assert (conv_reach(mamba), read_reach(mamba)) == (6, 3)  # the verdict reads layer 1's input: layer 0's conv
    assert torch.equal(inside_reach(mamba, batch), dist <= 3)
    assert not inside_reach(lm_with("attention", 0, ar_task.vocab_size), batch).any()


QUICK_MAMBA = Path(__file__).parents[2] / "results/cpu/quick/runs/preset-mamba_lr-0.003_seed-0"


@pytest.mark.skipif(not QUICK_MAMBA.exists(), reason="the committed cpu-scale quick study is not in this checkout")
def test_the_control_excludes_the_distances_whose_readout_is_trivial_on_a_trained_mamba():
    """The committed quick-study Mamba (d_conv 4, seed 0), per key distance at the read point (layer 1's
    input): the pair inside layer 0's reach reads @query ≈ 1 (trivial), the one just beyond it, which the
    reach of both layers would also exclude, reads key-side; the control excludes exactly the first."""
    from mecheval import load_run

    lm, task, _ = load_run(QUICK_MAMBA)
    batch = task.sample(512, seed=11, split="test")
    dist = key_distance(batch)
    masks = {str(int(d)): dist == d for d in torch.unique(dist)}
    df = interchange(lm, task, batch, "key", ["layers.1.resid_pre"], ["key", "query"], seed=1, subsets=masks, n_boot=100)
    at = df.pivot_table(index="subset", columns="position", values="attrib")
    lo = df.pivot_table(index="subset", columns="position", values="attrib_lo")
    reach = read_reach(lm)
    trivial = {int(d) for d in at.index if lo.at[d, "query"] >= 0.8}
    assert trivial == {d for d in map(int, at.index) if d <= reach} == {3}
    assert at.at[str(reach + 2), "query"] < 0.5 and at.at[str(reach + 2), "key"] > 0.5
    assert set(dist[inside_reach(lm, batch)].tolist()) == trivial


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
    table = accuracy_table(correct_answers(lm, batch), batch, subsets(lm, batch)).set_index("subset")
    assert table.at["all", "n"] == 200 == table.at["outside", "n"] + table.at["inside", "n"]
    dist = table[table.index.str.startswith("distance")]
    assert dist["n"].sum() == 200
    weighted = (dist["acc"] * dist["n"]).sum() / 200
    assert weighted == pytest.approx(table.at["all", "acc"], abs=1e-12)
    assert (table["acc_lo"] <= table["acc"]).all() and (table["acc"] <= table["acc_hi"]).all()
    assert isinstance(table, pd.DataFrame)
