"""Mamba-3's question, decided over seeds by intervals: does zeroing one of its own terms break retrieval?"""

import pandas as pd
import pytest

from mecheval.interventions.terms import TERMS, TWO_TOKEN
from mecheval.report.decide import INCONCLUSIVE
from pages.modern import DOES_NOT, PLAYS, meeting_words, modern_rows, term_answer

TWO = TERMS["two-token"]


def _run(tmp_path, name, cut, n=512, base=0.99, file=TWO_TOKEN):
    """A run directory whose table `file` reads `base` unablated and `cut` with the term zeroed everywhere."""
    run = tmp_path / name
    run.mkdir(exist_ok=True)
    rows = [("none", base), ("0+1", cut), ("0", base), ("1", cut), ("0+1@value", cut), ("0+1@not value", base)]
    pd.DataFrame([{"layers": k, "acc": a, "acc_lo": max(a - 0.04, 0), "acc_hi": min(a + 0.04, 1), "n": n}
                  for k, a in rows]).to_parquet(run / file)
    return str(run)


def _best(tmp_path, cuts, verdicts=None):
    verdicts = verdicts or ["direct retrieval"] * len(cuts)
    return pd.DataFrame([{"arch": "mamba3", "seed": i, "verdict": v, "run_dir": _run(tmp_path, f"s{i}", c)}
                         for i, (c, v) in enumerate(zip(cuts, verdicts))])


@pytest.mark.parametrize("cuts, status", [([0.02, 0.05, 0.03], PLAYS),  # every seed breaks: the conv's role
                                          ([0.97, 0.99, 0.98], DOES_NOT),  # no seed cares
                                          ([0.02, 0.97, 0.50], INCONCLUSIVE)])  # seeds disagree: the interval spans both
def test_the_answer_is_decided_by_the_interval_over_seeds(tmp_path, cuts, status):
    assert term_answer(_best(tmp_path, cuts), "mamba3", TWO)[0] == status


def test_seeds_that_did_not_learn_are_not_read_and_none_learned_leaves_the_question_open(tmp_path):
    best = _best(tmp_path, [0.02, 0.95], verdicts=["direct retrieval", "not learned"])
    status, words = term_answer(best, "mamba3", TWO)
    assert status == PLAYS and "1 learned seed (0; of 2)" in words
    assert "On average over the 1 seed (at one position alone: value 0.02; everywhere but the value → 0.99)." in words
    status, words = term_answer(best.assign(verdict="not learned"), "mamba3", TWO)
    assert status == INCONCLUSIVE and "open" in words


def test_a_seed_that_does_not_retrieve_with_the_term_in_place_is_left_out_and_named(tmp_path):
    """Zeroing a term cannot show a fall below POOR_ACC in a run already at or near it (a run labelled learned at
    0.35): such a seed is not read, and the sentence names it."""
    best = _best(tmp_path, [0.02, 0.03, 0.34])
    _run(tmp_path, "s2", 0.34, base=0.35)  # learned, but at 0.35 with the term in place
    status, words = term_answer(best, "mamba3", TWO)
    assert status == PLAYS and "2 learned seeds (0, 1; of 3)" in words
    assert words.endswith("Seed 2 left out: 0.35 with the term in place, not above 0.4.")
    status, words = term_answer(best[best["seed"] == 2], "mamba3", TWO)
    assert status == INCONCLUSIVE and "open" in words and "Seed 2 left out" in words


def test_where_key_and_value_meet_names_the_ablation_and_its_numbers(tmp_path):
    run = _run(tmp_path, "r", 0.03)
    assert meeting_words(run) == ("two-token term zeroed in layers 0+1: 0.99 → 0.03 (at one position alone: value "
                                  "0.03; everywhere but the value → 0.99)")
    assert meeting_words(str(tmp_path)) == "–"  # no analysis: nothing claimed
    both = _run(tmp_path, "both", 0.03)
    _run(tmp_path, "both", 0.90, file=TERMS["rotary"].file)  # each term's reading, in TERMS' order
    assert meeting_words(both) == (meeting_words(run) + ", rotation's angle steps zeroed in layers 0+1: 0.99 → 0.90 "
                                   "(at one position alone: value 0.90; everywhere but the value → 0.99)")
    roles = tmp_path / "roles"  # a table of every role's position (the rotation read as the analysis reads it now)
    roles.mkdir()
    rows = [("none", 0.88), ("0+1", 0.11), ("0+1@key", 0.23), ("0+1@not key", 0.25), ("0+1@value", 0.87),
            ("0+1@not value", 0.07), ("0+1@query", 0.46), ("0+1@not query", 0.27)]
    pd.DataFrame([{"layers": k, "acc": a, "acc_lo": a, "acc_hi": a, "n": 385} for k, a in rows]).to_parquet(
        roles / TERMS["rotary"].file)
    assert meeting_words(str(roles)) == ("rotation's angle steps zeroed in layers 0+1: 0.88 → 0.11 (at one position "
                                         "alone: key 0.23, value 0.87, query 0.46; everywhere but the key → 0.25)")
    status, words = term_answer(pd.DataFrame([{"arch": "mamba3", "seed": 0, "verdict": "direct retrieval",
                                               "run_dir": both}]), "mamba3", TERMS["rotary"])
    assert status == DOES_NOT and words.startswith("mamba3: zeroing the rotation's angle steps in every layer")
    summary = pd.DataFrame([{"arch": "mamba3", "optim.lr": 3e-3, "seed_list": "0", "acc_outside": 0.99,
                             "acc_outside_lo": 0.98, "acc_outside_hi": 1.0, "verdicts": "direct retrieval 1"}])
    best = pd.DataFrame([{"arch": "mamba3", "seed": 0, "verdict": "direct retrieval", "run_dir": run}])
    row, = modern_rows(summary, best)
    assert row["where key and value meet"] == "seed 0: " + meeting_words(run)
    assert row["accuracy [95%]"] == "0.99 [0.98, 1.00]"


def test_without_a_conv_or_a_term_the_state_says_how_far_each_layer_carries_the_key(tmp_path):
    """A mixer with neither (Gated DeltaNet without its conv): the state readout in words, per layer; a run with a
    conv or a term reading keeps those alone."""
    def rows(layer, attribs, last):
        out = [{"layer": layer, "align": "key", "offset": o, "direction": "sufficiency", "attrib": a,
                "attrib_lo": a - 0.05, "attrib_hi": a + 0.05, "n": 200} for o, a in enumerate(attribs)]
        return out + [{"layer": layer, "align": "answer", "offset": -1, "direction": "sufficiency", "attrib": last,
                       "attrib_lo": last - 0.05, "attrib_hi": last + 0.05, "n": 512}]

    run = tmp_path / "no-conv"
    run.mkdir()
    pd.DataFrame(rows(0, [0.89, 0.17, 0.01, 0.0], -0.001) + rows(1, [0.1, 0.86, 0.99, 1.0], 1.0)).to_parquet(
        run / "state_curve.parquet")
    assert meeting_words(str(run)) == (
        "recurrent state: layer 0's state carries the key after key+0 alone (restores up to 0.89), 0.00 before the "
        "answer; layer 1's state carries the key from key+1 to key+3 (restores up to 1.00), 1.00 before the answer")
    term = _run(tmp_path, "no-conv", 0.03)  # the same run with a term read: the term's words alone
    assert meeting_words(term).startswith("two-token term zeroed") and "state" not in meeting_words(term)


def test_the_modern_block_reads_the_committed_mamba3_study_and_answers_from_it(tmp_path):
    """The page block on results/cpu/modern-mamba3: a row per variant and the answer, its numbers from the files."""
    from pathlib import Path

    from pages.blocks import generate

    committed = Path(__file__).resolve().parents[2] / "results" / "cpu" / "modern-mamba3"
    (tmp_path / "results" / "cpu").mkdir(parents=True)
    (tmp_path / "results" / "cpu" / "modern-mamba3").symlink_to(committed)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "p.md").write_text("<!-- generated: modern preset=modern scale=cpu -->\n<!-- end generated -->\n")
    block = generate(tmp_path)[Path("docs/p.md")]
    assert "| mamba3 (d_conv 4) | 0.003 | 0, 1, 2 |" in block and "| mamba3 | 0.003 |" in block
    assert "mamba3: zeroing the two-token term in every layer takes accuracy from" in block
    assert "at one position alone: key" in block and "short conv of layer 1" in block
    assert "mamba3: zeroing the rotation's angle steps in every layer takes accuracy from" in block
    # with a conv, both readings of a seed side by side, and the answer for that variant too (its runs have both)
    assert "lagged taps zeroed: " in block and "), two-token term zeroed in layers 0+1" in block
    assert "mamba3 (d_conv 4): zeroing the two-token term in every layer" in block


def test_the_controls_by_key_value_distance_are_averaged_over_seeds_in_words(tmp_path):
    """ATR's tables also read the controls on the adjacent and the apart examples alone (`terms.term_ablation`):
    the answer's sentence gives them averaged over the seeds; AR's (and older) tables add nothing."""
    best = _best(tmp_path, [0.20, 0.30])
    for i, (at, off) in enumerate([(0.40, 0.60), (0.50, 0.70)]):
        run = tmp_path / f"s{i}"
        table = pd.read_parquet(run / TWO_TOKEN).assign(examples="all")
        parts = [("adjacent", 274 + i, [("none", 0.9), ("0+1", 0.3), ("0+1@value", at), ("0+1@not value", off)]),
                 ("apart", 238 - i, [("none", 0.7), ("0+1", 0.2), ("0+1@value", 0.6), ("0+1@not value", 0.25),
                                     ("0+1@key..value", at), ("0+1@not key..value", off - 0.4)])]
        extra = [{"layers": k, "acc": a, "acc_lo": a, "acc_hi": a, "n": n, "examples": name}
                 for name, n, rows in parts for k, a in rows]
        pd.concat([table, pd.DataFrame(extra)]).to_parquet(run / TWO_TOKEN)
    words = term_answer(best, "mamba3", TWO)[1]
    assert words.endswith(
        " By the key–value distance, on average over the seeds: where the value follows its key (274 examples a "
        "seed): 0.90 → 0.30 in every layer; at the value alone 0.45, everywhere but the value 0.65; where they lie "
        "apart (238 examples a seed): 0.70 → 0.20 in every layer; at the value alone 0.60, everywhere but the value "
        "0.25, on the stretch key+1 … value alone 0.45, everywhere but that stretch 0.25.")
    (tmp_path / "ar").mkdir()
    assert "key–value distance" not in term_answer(_best(tmp_path / "ar", [0.20, 0.30]), "mamba3", TWO)[1]


def test_the_modern_block_shows_a_run_that_fits_its_training_set_only(tmp_path):
    """At the published protocol (a fixed training set) the block gives the fit table where a run fits its set
    and not the task: results/paper-d64/modern-mamba3-lr1e-2, training batches far above test."""
    from pathlib import Path

    from pages.blocks import generate

    committed = Path(__file__).resolve().parents[2] / "results" / "paper-d64" / "modern-mamba3-lr1e-2"
    (tmp_path / "results" / "paper-d64").mkdir(parents=True)
    (tmp_path / "results" / "paper-d64" / "modern-mamba3-lr1e-2").symlink_to(committed)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "p.md").write_text(
        "<!-- generated: modern study=results/paper-d64/modern-mamba3-lr1e-2 -->\n<!-- end generated -->\n")
    block = generate(tmp_path)[Path("docs/p.md")]
    assert "Fit to the training set." in block
    row = next(line for line in block.splitlines() if line.startswith("| mamba3 | 64 | 0.01 | 0 |"))
    assert row.endswith("| fits its training set only |") and "(n=1024)" in row
