"""The report's summary is generated from the data: verdicts with their seed counts, where a conv binds
key and value, and how many published findings reproduce."""

import pandas as pd

from mecheval.report.overview import mechanism_words, overview_table, overview_text

ROWS = [
    {"arch": "attention", "model.d_model": 64, "seeds": 3, "acc": 0.98, "acc_outside": 0.98, "acc_outside_lo": 0.91,
     "acc_outside_hi": 1.0, "verdict": "direct retrieval", "verdicts": "direct retrieval 2, induction 1",
     "detail": "answer already at the query", "published_verdict": "induction", "published_acc": 1.0,
     "agree": "differ"},
    {"arch": "mamba (d_conv 0)", "model.d_model": 64, "seeds": 3, "acc": 0.25, "acc_outside": 0.24,
     "acc_outside_lo": 0.23, "acc_outside_hi": 0.25, "verdict": "not learned", "verdicts": "not learned 3",
     "detail": "corrupting the key changes nothing", "published_verdict": None, "published_acc": float("nan"),
     "agree": ""},
]
FORMED = {"attention": {"layer": 1, "offset": 3, "attrib": 0.6, "lo": 0.55, "hi": 0.65, "acc": 0.96, "cut_acc": 0.01},
          "mamba (d_conv 0)": {"layer": 1, "offset": 3, "attrib": 0.9, "lo": 0.85, "hi": 0.95, "acc": 0.3, "cut_acc": 0.2}}


def test_mechanism_words_count_seeds_and_name_the_conv():
    row = pd.Series(ROWS[0])
    words = mechanism_words(row, FORMED["attention"])
    assert words.startswith("direct retrieval in 2 of 3 seeds (direct retrieval 2, induction 1): answer already")
    assert "layer 1's short conv" in words and "key+3 restores 0.60 [0.55, 0.65]" in words and "0.96 → 0.01" in words
    below = {**FORMED["attention"], "attrib": 0.3, "lo": 0.25, "hi": 0.35}
    assert "short conv" not in mechanism_words(row, below)  # the interval below FORMED
    spans = {**FORMED["attention"], "attrib": 0.48, "lo": 0.42, "hi": 0.53}
    assert "restores 0.48 [0.42, 0.53]" in mechanism_words(row, spans)  # reaching FORMED: not evidence against


def test_a_tied_verdict_counts_its_own_seeds_wherever_the_tally_lists_it():
    row = pd.Series({**ROWS[0], "seeds": 2, "verdict": "direct retrieval", "verdicts": "not learned 1, direct retrieval 1"})
    assert mechanism_words(row, None).startswith("direct retrieval in 1 of 2 seeds (not learned 1, direct retrieval 1)")


def test_an_unlearned_model_gets_no_conv_reading_and_no_agreement():
    table = overview_table(pd.DataFrame(ROWS), FORMED)
    assert list(table.columns) == ["architecture", "accuracy [95% CI]", "mechanism (ours)", "published", "agrees"]
    assert table.loc[1, "mechanism (ours)"] == "not learned in 3 of 3 seeds: corrupting the key changes nothing"
    assert table.loc[1, "agrees"] == "–" and table.loc[1, "published"] == "–"
    assert table.loc[0, "accuracy [95% CI]"] == "0.98 [0.91, 1.00], 3 seeds"
    assert table.loc[0, "published"] == "induction, accuracy 1.00"


def test_overview_text_says_what_disagrees_and_which_findings_fail():
    text = overview_text(pd.DataFrame(ROWS), FORMED, [("A holds.", "reproduced"), ("B holds.", "not reproduced"),
                                                      ("C holds.", "not run")])
    assert text.startswith("2 architectures (3 seeds each, best learning rate).")
    assert "attention: direct retrieval in 2 of 3 seeds (direct retrieval 2, induction 1), published: induction" in text
    assert "1 of 2 published findings checked here reproduce; not: B holds." in text
    assert "C holds" not in text


def test_overview_text_names_the_inconclusive_findings_apart():
    text = overview_text(pd.DataFrame(ROWS), FORMED, [("A holds.", "reproduced"), ("B holds.", "inconclusive")])
    assert text.endswith("1 of 2 published findings checked here reproduce. Inconclusive (an interval spans the threshold, or an architecture the claim names has not run): B holds.")


def test_no_findings_sentence_when_none_was_checked():
    text = overview_text(pd.DataFrame(ROWS), FORMED, [("C holds.", "not run")])
    assert "published findings" not in text


def test_the_first_sentence_says_which_seeds_and_how_many_examples_each_verdict_rests_on():
    rows = [{**r, "seeds": 1, "seed_list": "0", "n_min": n, "n_max": n} for r, n in zip(ROWS, (385, 512))]
    text = overview_text(pd.DataFrame(rows), FORMED, [])
    assert text.startswith("2 architectures (1 seed each (seed 0), best learning rate; verdicts read on 385–512 test examples each).")
    rows = [{**r, "seed_list": "0, 1, 2", "n_min": 512, "n_max": 512} for r in ROWS]
    assert overview_text(pd.DataFrame(rows), FORMED, []).startswith(
        "2 architectures (3 seeds each (seeds 0, 1, 2), best learning rate; verdicts read on 512 test examples each).")


def test_wall_time_line_has_no_empty_parenthesis():
    from mecheval.report.build import wall_time_line

    assert wall_time_line({"wall_time_s": 8946.0, "scale": "paper", "cpu_drops": ""}) == "Wall time: 149.1 min."
    cpu = wall_time_line({"wall_time_s": 120.0, "scale": "cpu", "cpu_drops": "one width (64)"})
    assert cpu == "Wall time: 2.0 min. At the cpu scale this study drops one width (64)."
    assert wall_time_line({"wall_time_s": 4145.5, "scale": "paper"}) == "Wall time: 69.1 min."  # no cpu_drops at all
    assert wall_time_line({}) == ""
