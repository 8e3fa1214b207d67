"""Like-for-like comparisons: two runs' accuracies on the same examples, and the ATR findings decided by intervals."""

import numpy as np
import pandas as pd
import pytest
import torch

from mecheval.interventions.accuracy import EXAMPLES, accuracy_table, correct_answers, example_table
from mecheval.interventions.artefact import subsets
from mecheval.models import build_model
from mecheval.report.findings import FINDINGS
from mecheval.report.overview import GRAMMAR
from mecheval.report.paired import at_least_as_accurate, paired_accuracy
from mecheval.tasks import make_task


def examples(correct, outside, ids=None) -> pd.DataFrame:
    n = len(correct)
    return pd.DataFrame({"example": range(n), "id": ids or [f"e{i}" for i in range(n)], "distance": [5] * n,
                         "correct": correct, "all": [True] * n, "outside": outside, "inside": [not o for o in outside]})


def test_paired_accuracy_reads_both_runs_on_the_same_examples():
    a = examples([True, True, False, True], [True, True, True, False])
    b = examples([True, False, False, False], [True, False, True, True])
    table = paired_accuracy(a, b).set_index("subset")
    assert table.at["all", "n"] == 4 and table.at["all", "acc_a"] == 0.75 and table.at["all", "acc_b"] == 0.25
    # outside both: examples 0 and 2 (a skips 3, b skips 1)
    assert table.at["outside both", "n"] == 2
    assert table.at["outside both", "acc_a"] == 0.5 and table.at["outside both", "acc_b"] == 0.5
    for _, r in table.iterrows():
        assert r["diff_lo"] <= r["diff"] <= r["diff_hi"]


def test_paired_accuracy_refuses_other_examples():
    a = examples([True, False], [True, True])
    b = examples([True, False], [True, True], ids=["e0", "other"])
    with pytest.raises(ValueError, match="different examples"):
        paired_accuracy(a, b)


@pytest.mark.parametrize(("lo", "hi", "decided"), [(-0.01, 0.03, True), (-0.08, -0.03, False), (-0.05, 0.01, None)])
def test_non_inferiority_is_decided_by_the_interval(lo, hi, decided):
    assert at_least_as_accurate(pd.Series({"diff_lo": lo, "diff_hi": hi}), margin=0.02) is decided


def _write(tmp_path, name, table) -> str:
    run = tmp_path / name
    run.mkdir(parents=True)
    table.to_parquet(run / EXAMPLES, index=False)
    return str(run)


def _rows(tmp_path, mamba, attention) -> pd.DataFrame:
    return pd.DataFrame([{"arch": "mamba", "seed": 0, "run_dir": _write(tmp_path, "m", mamba)},
                         {"arch": "attention", "seed": 0, "run_dir": _write(tmp_path, "a", attention)}])


def test_mamba_vs_attention_finding_compares_on_the_same_examples(tmp_path):
    rng = np.random.default_rng(0)
    n = 1000
    outside = list(rng.random(n) < 0.8)
    check = FINDINGS["atr_mamba_vs_attention"].check
    better = _rows(tmp_path / "1", examples(list(rng.random(n) < 0.95), outside), examples(list(rng.random(n) < 0.7), outside))
    worse = _rows(tmp_path / "2", examples(list(rng.random(n) < 0.6), outside), examples(list(rng.random(n) < 0.9), outside))
    assert check(better).status == "reproduced"
    outcome = check(worse)
    assert outcome.status == "not reproduced" and "outside both" in outcome.evidence


def test_mamba_vs_attention_finding_pairs_runs_within_each_grammar(tmp_path):
    rng = np.random.default_rng(1)
    n = 1000
    outside = list(rng.random(n) < 0.8)
    easy = _rows(tmp_path / "easy", examples(list(rng.random(n) < 0.95), outside), examples(list(rng.random(n) < 0.7), outside))
    medium = _rows(tmp_path / "medium", examples(list(rng.random(n) < 0.6), outside), examples(list(rng.random(n) < 0.9), outside))
    alone = _rows(tmp_path / "lv", examples(list(rng.random(n) < 0.1), outside), examples([True] * n, outside)).iloc[:1]
    rows = pd.concat([easy.assign(**{GRAMMAR: None}), medium.assign(**{GRAMMAR: "medium"}),
                      alone.assign(**{GRAMMAR: "large_vocab"})], ignore_index=True)
    outcome = FINDINGS["atr_mamba_vs_attention"].check(rows)
    # easy (no grammar: the default) passes, medium fails, each read apart; large_vocab has no attention run, so no pair
    assert outcome.status == "not reproduced"
    assert outcome.parts == {"on easy": "reproduced (1 of 1 seed)", "on medium": "not reproduced (0 of 1 seed)"}
    assert outcome.evidence.startswith("on easy: 1 of 1 runs pass") and "easy seed 0/0" in outcome.evidence
    assert "on medium: 0 of 1 runs pass" in outcome.evidence and "large_vocab" not in outcome.evidence
    assert FINDINGS["atr_mamba_vs_attention"].check(rows.iloc[[0, 3]]).status == "not run"


def test_mamba_vs_attention_finding_needs_per_example_readouts(tmp_path):
    rows = pd.DataFrame([{"arch": "mamba", "seed": 0, "run_dir": str(tmp_path)},
                         {"arch": "attention", "seed": 0, "run_dir": str(tmp_path)}])
    outcome = FINDINGS["atr_mamba_vs_attention"].check(rows)
    assert outcome.status == "not run" and EXAMPLES in outcome.evidence


def test_noconv_induction_finding_is_inconclusive_where_the_value_interval_straddles():
    def row(lo, hi):
        return {"arch": "mamba (d_conv 0)", "seed": 0, "model.d_model": 64, "acc": 0.9, "acc_all": 0.9, "n_all": 1024,
                "acc_all_lo": 0.88, "acc_all_hi": 0.92, "verdict": "mixed", "attrib@value": (lo + hi) / 2,
                "attrib@value_lo": lo, "attrib@value_hi": hi, "attrib@query": 0.3, "attrib@key": 0.1}
    check = FINDINGS["atr_mamba_noconv_induction"].check
    assert check(pd.DataFrame([row(0.78, 0.85)])).status == "reproduced"
    assert check(pd.DataFrame([row(0.45, 0.55)])).status == "inconclusive"
    assert check(pd.DataFrame([row(0.30, 0.40)])).status == "not reproduced"


def test_example_table_agrees_with_the_accuracy_table():
    torch.manual_seed(0)
    task = make_task("atr", grammar="easy")
    lm = build_model({"preset": "mamba", "d_model": 16, "vocab_size": task.vocab_size}).eval()
    batch = task.sample(64, seed=0, split="test")
    masks = subsets(lm, batch)
    correct = correct_answers(lm, batch)
    per_example = example_table(correct, batch, masks)
    by_subset = accuracy_table(correct, batch, masks).set_index("subset")
    assert len(per_example) == 64
    for name in ("all", "outside"):
        part = per_example[per_example[name]]
        assert by_subset.at[name, "n"] == len(part)
        assert by_subset.at[name, "acc"] == pytest.approx(part["correct"].mean())

    def ids(other):
        return example_table(correct_answers(lm, other), other, masks)["id"].tolist()

    assert ids(task.sample(64, seed=0, split="test")) == per_example["id"].tolist()
    assert ids(task.sample(64, seed=1, split="test")) != per_example["id"].tolist()
