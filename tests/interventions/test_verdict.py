"""Mechanism verdicts: hand-built models with known circuits, and the rules on synthetic tables."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from mecheval.interventions import interchange, mechanism
from mecheval.interventions.conv_window import best_cell, conv_ablation, conv_window
from mecheval.interventions.verdict import formed_at
from tests.interventions.handbuilt import key_readout, conv_binding_lm, induction_lm, query_retrieval_lm


@pytest.fixture(scope="module")
def batch(handbuilt_batch):
    return handbuilt_batch


def test_handbuilt_models_solve_the_task(ar_task, batch):
    for build in (induction_lm, query_retrieval_lm):
        lm = build(ar_task.vocab_size, batch.tokens.shape[1])
        assert (lm(batch.tokens, positions=batch.answer_pos).argmax(-1) == batch.answer).all()


def test_induction_model_gets_induction(ar_task, batch):
    lm = induction_lm(ar_task.vocab_size, batch.tokens.shape[1])
    v = mechanism(key_readout(lm, ar_task, batch))
    assert v.label == "induction"
    assert v.layer == 1 and v.effect > 0.9
    assert v.attrib_value == pytest.approx(1, abs=1e-3)
    assert v.attrib_query == pytest.approx(0, abs=1e-3) and v.attrib_key == pytest.approx(0, abs=1e-3)


def test_three_layer_model_is_read_where_the_answer_reaches_the_query(ar_task, batch):
    """Induction in layers 0-1 and an inert layer 2: at layer 2's input the answer already sits at the
    query, so the verdict reads layer 1's input and finds the induction."""
    lm = query_retrieval_lm(ar_task.vocab_size, batch.tokens.shape[1])
    df = key_readout(lm, ar_task, batch)
    v = mechanism(df)
    assert (v.label, v.layer, v.site) == ("induction", 1, "resid_pre")
    assert v.attrib_value == pytest.approx(1, abs=1e-3) and v.attrib_query == pytest.approx(0, abs=1e-3)
    forced = mechanism(df, layer=2)  # read at the last layer's input instead: the answer is at the query
    assert forced.label == "direct retrieval" and forced.attrib_query == pytest.approx(1, abs=1e-3)
    assert forced.detail.startswith("answer already at the query by the input of layer 2")


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


def test_association_formed_in_the_last_layers_conv_window(ar_task, batch):
    """Key and value meet only in layer 1's conv output at key + 1: the published label (direct
    retrieval: @key high, @value low), the detail naming the conv, and the conv-window analysis finding
    that offset (conv_out at key + 1; the conv's input at the key itself)."""
    lm = conv_binding_lm(ar_task.vocab_size)
    assert (lm(batch.tokens, positions=batch.answer_pos).argmax(-1) == batch.answer).float().mean() > 0.95
    window = conv_window(lm, ar_task, batch, seed=3, n_boot=50)
    v = mechanism(key_readout(lm, ar_task, batch), conv_window=window)
    assert v.label == "direct retrieval" and v.layer == 1
    assert v.attrib_key > 0.9 and abs(v.attrib_value) < 0.05 and abs(v.attrib_query) < 0.05
    assert "short conv window (conv_out at key+1" in v.detail
    assert formed_at(window, 1)["offset"] == 1
    suff = window[(window["direction"] == "sufficiency") & (window["layer"] == 1) & ~window["joint"]]
    at = suff.set_index(["site", "offset"])["attrib"]
    assert at["conv_out", 1] > 0.9 and abs(at["conv_out", 0]) < 0.05
    assert at["conv_in", 0] > 0.9 and abs(at["conv_in", 1]) < 0.05
    nec = window[(window["direction"] == "necessity") & (window["layer"] == 1) & ~window["joint"]]
    assert nec.set_index(["site", "offset"])["attrib"]["conv_out", 1] > 0.9  # needed there, too
    assert window[window["layer"] == 0]["attrib"].abs().max() < 0.05  # layer 0 writes nothing


def test_one_layer_model_is_read_inside_its_mixer_not_at_the_embedding(ar_task, batch):
    lm = conv_binding_lm(ar_task.vocab_size, n_layers=1)
    df = interchange(lm, ar_task, batch, "key", ["resid_pre", "conv_out"], ["key", "value", "query"], seed=3,
                     subsets=None)
    v = mechanism(df)
    assert (v.site, v.layer) == ("conv_out", 0)
    assert v.label == "induction" and v.attrib_value > 0.9  # the binding sits at the value position (key + 1)
    embed = df[(df["site"] == "resid_pre") & (df["position"] == "key")]["attrib"].item()
    assert embed > 0.9  # what reading the embedding would have called "direct retrieval"
    with pytest.raises(ValueError, match="no site between the embedding"):
        mechanism(interchange(lm, ar_task, batch, "key", ["resid_pre"], ["key", "value", "query"], seed=3))


def test_a_one_layer_model_without_a_conv_that_did_not_learn_reads_not_learned():
    """No read point (1 layer, no conv): a model whose effect's interval lies below the filter is `not learned`;
    one that learned still has nothing to read, and says so."""
    one_layer = _synthetic(0, 0, 0, p_clean=0.105, p_corrupt=0.1).assign(layer=0, n_layers=1)
    v = mechanism(one_layer.assign(effect_lo=0.002, effect_hi=0.008))
    assert v.label == "not learned" and "no site to read" in v.detail and v.effect == pytest.approx(0.005)
    with pytest.raises(ValueError, match="no site between the embedding"):
        mechanism(one_layer.assign(effect_lo=0.004, effect_hi=0.02))  # it may have learned: nothing decides it
    with pytest.raises(ValueError, match="no site between the embedding"):
        mechanism(_synthetic(0, 0, 0).assign(layer=0, n_layers=1))


def test_tap_ablation_of_the_binding_layer_drops_accuracy_to_chance(ar_task, batch):
    lm = conv_binding_lm(ar_task.vocab_size)
    ab = conv_ablation(lm, batch).set_index(["layers", "lags"])
    assert ab.loc[("none", "none"), "acc"] > 0.95
    assert ab.loc[("1", ">=1"), "acc_hi"] < 0.5 and ab.loc[("0", ">=1"), "acc"] > 0.95
    before = [p.clone() for p in lm.parameters()]
    conv_ablation(lm, batch)
    assert all(torch.equal(a, b) for a, b in zip(before, lm.parameters()))  # the weights are restored


def test_tap_ablation_has_one_row_per_layer_set_and_lag(ar_task, batch):
    lm = conv_binding_lm(ar_task.vocab_size)  # short convs in both layers (kernel 2)
    ab = conv_ablation(lm, batch)
    assert not ab.duplicated(["layers", "lags"]).any()
    assert set(zip(ab["layers"], ab["lags"])) == {("none", "none"), ("0+1", ">=1"), ("0", ">=1"), ("0", "1"),
                                                  ("1", ">=1"), ("1", "1")}
    one = conv_binding_lm(ar_task.vocab_size, n_layers=1)
    assert set(zip(*conv_ablation(one, batch)[["layers", "lags"]].T.values)) == {("none", "none"), ("0", ">=1"), ("0", "1")}


def _with_intervals(df: pd.DataFrame, half: float, joint: tuple[float, float, float] | None = None) -> pd.DataFrame:
    """The synthetic table with intervals attrib ± half, and optionally a joint key&query row (point, lo, hi)."""
    df = df.assign(attrib_lo=df["attrib"] - half, attrib_hi=df["attrib"] + half)
    if joint is not None:
        row = df.iloc[[0]].assign(position="key&query", attrib=joint[0], attrib_lo=joint[1], attrib_hi=joint[2])
        df = pd.concat([df, row], ignore_index=True)
    return df


@pytest.mark.parametrize(
    "attribs, half, label",
    [
        ((0.0, 0.83, 0.05), 0.02, "induction"),  # [0.81, 0.85] clears 0.8
        ((0.0, 0.83, 0.05), 0.05, "inconclusive"),  # [0.78, 0.88] straddles 0.8
        ((0.0, 0.77, 0.05), 0.05, "inconclusive"),  # a point estimate below 0.8 whose interval reaches it
        ((0.0, 0.70, 0.05), 0.05, "mixed"),  # [0.65, 0.75]: decidedly below
    ],
)
def test_labels_are_decided_by_intervals(attribs, half, label):
    v = mechanism(_with_intervals(_synthetic(*attribs), half))
    assert v.label == label
    if label == "inconclusive":
        assert "straddles" in v.detail and "@value" in v.detail


def test_direct_retrieval_reads_the_joint_key_and_query_patch():
    singles = _with_intervals(_synthetic(0.42, 0.0, 0.39), 0.03)  # the sum 0.81, the intervals' sum [0.75, 0.87]
    assert mechanism(singles).label == "inconclusive"
    v = mechanism(_with_intervals(_synthetic(0.42, 0.0, 0.39), 0.03, joint=(0.9, 0.85, 0.95)))
    assert v.label == "direct retrieval" and v.attrib_joint == 0.9 and "@key&query 0.90 [0.85, 0.95]" in v.detail
    assert mechanism(_with_intervals(_synthetic(0.42, 0.0, 0.39), 0.03, joint=(0.7, 0.65, 0.75))).label == "mixed"


def test_the_published_mamba_reading_that_flipped_is_inconclusive():
    """make run's Mamba: @key 0.42 + @query 0.31 = 0.73 (printed `mixed`), the same seed at other rounding
    0.804 (`direct retrieval`): with intervals of ±0.06 on ~250 examples neither label is decided."""
    for key, query in ((0.42, 0.31), (0.45, 0.354)):
        assert mechanism(_with_intervals(_synthetic(key, 0.0, query), 0.06)).label == "inconclusive"


def test_not_learned_is_decided_by_the_effects_interval():
    df = _synthetic(0, 1, 0, p_clean=0.105, p_corrupt=0.1)
    assert mechanism(df.assign(effect_lo=0.001, effect_hi=0.009)).label == "not learned"
    assert mechanism(df.assign(effect_lo=0.002, effect_hi=0.02)).label == "inconclusive"
    assert mechanism(_with_intervals(_synthetic(0, 0.95, 0.0), 0.02).assign(effect_lo=0.5, effect_hi=0.9)).label == "induction"


def test_interchange_patches_joined_roles_together(ar_task, batch):
    """`key&query` patches both positions in one cell: on the key-binding model (@key ≈ 1 alone) the joint
    cell restores as much as the key alone, and has its own interval."""
    lm = conv_binding_lm(ar_task.vocab_size)
    df = interchange(lm, ar_task, batch, "key", ["layers.1.resid_pre"], ["key", "query", "key&query"], seed=3,
                     subsets=None)
    at = df.set_index("position")
    assert at.at["key&query", "attrib"] == pytest.approx(at.at["key", "attrib"], abs=0.05)
    assert at.at["key&query", "attrib_lo"] <= at.at["key&query", "attrib"] <= at.at["key&query", "attrib_hi"]
    assert (df["effect_lo"] <= df["effect_hi"]).all()
    with pytest.raises(ValueError, match="are not roles of this batch"):
        interchange(lm, ar_task, batch, "key", ["resid_pre"], ["key&nowhere"])


def test_a_conv_window_with_nothing_to_attribute_has_no_best_cell():
    """A model that did not learn: every conv cell's attribution NaN. No cell is named, none raises."""
    window = pd.DataFrame({"layer": 0, "site": "conv_out", "offset": [0, 1, 2], "joint": False,
                           "direction": "sufficiency", "attrib": float("nan")})
    assert best_cell(window) is None and best_cell(window, layer=0) is None
    assert best_cell(window.assign(attrib=[0.1, float("nan"), 0.3]))["offset"] == 2


def test_a_run_whose_clean_and_corrupt_agree_has_undefined_intervals_and_no_warning():
    """A run that did not learn: clean = corrupt on every example, so each resample's attribution is 0/0 or x/0;
    its interval is undefined (nan or inf), computed without numpy's `invalid value` warning reaching the user."""
    import warnings

    import numpy as np

    from mecheval.interventions.metrics import bootstrap_attribution

    p = np.full(64, 0.125)
    patched = np.stack([p, p + np.linspace(-0.01, 0.01, 64)])  # [C = 2, B]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lo, hi = bootstrap_attribution(patched, p, p)
    assert lo.shape == hi.shape == (2,) and not np.isfinite(lo).any() | np.isfinite(hi).any()


def _accuracy(acc: float, n: int = 512, chance: float = 1 / 16, subset: str = "all"):
    from mecheval.interventions.metrics import accuracy_interval
    from mecheval.interventions.verdict import Accuracy

    lo, hi = accuracy_interval(round(acc * n), n)
    return Accuracy(pd.DataFrame({"subset": [subset], "acc": [acc], "acc_lo": [lo], "acc_hi": [hi], "n": [n]}), chance)


def test_a_model_at_chance_is_not_learned_whatever_its_effect():
    """A clear effect and a clean direct-retrieval pattern, but accuracy 0.07 on 512 examples with chance 1/16
    (not above it by a one-sided binomial test): `not learned`, the accuracy named; just above chance it keeps its
    label; an accuracy table without the subset read, or an unknown chance, decides nothing."""
    table = _synthetic(0.0, 0.05, 0.95)
    assert mechanism(table).label == "direct retrieval"
    v = mechanism(table, accuracy=_accuracy(0.07))
    assert v.label == "not learned" and "accuracy 0.07" in v.detail and "chance 0.06" in v.detail
    assert mechanism(table, accuracy=_accuracy(0.10)).label == "direct retrieval"  # 51 of 512: p < 0.001
    assert mechanism(table, accuracy=_accuracy(0.07, subset="outside")).label == "direct retrieval"
    assert mechanism(table, accuracy=_accuracy(0.07, chance=float("nan"))).label == "direct retrieval"
    assert mechanism(table, accuracy=_accuracy(0.07, chance=0.0)).label == "direct retrieval"


def test_a_one_layer_model_without_a_conv_at_chance_reads_not_learned():
    one_layer = _synthetic(0, 0, 0).assign(layer=0, n_layers=1)
    v = mechanism(one_layer, accuracy=_accuracy(0.05))
    assert v.label == "not learned" and "not above chance" in v.detail and "no site to read" in v.detail
    with pytest.raises(ValueError, match="no site between the embedding"):
        mechanism(one_layer, accuracy=_accuracy(0.5))
