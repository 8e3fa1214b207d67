"""Each published finding's check: reproduced on rows that show it, not reproduced on rows that break
it, `not run` without the architectures it names."""

import pandas as pd
import pytest

from mecheval.report.findings import DEPTH_ZOO, FINDINGS, checked


def runs(*rows) -> pd.DataFrame:
    cols = ["arch", "acc", "verdict", "attrib@value", "attrib@query", "attrib@key", "chance"]
    df = pd.DataFrame([dict(zip(cols, r)) for r in rows], columns=cols)
    df["model.d_model"] = 64
    df["eval.size"] = 512
    df["seed"] = 0
    return df


def with_ci(df: pd.DataFrame, half: float = 0.05) -> pd.DataFrame:
    """The rows with a 95% interval of +-half around attrib@value."""
    return df.assign(**{"attrib@value_lo": df["attrib@value"] - half, "attrib@value_hi": df["attrib@value"] + half})


def on_heldout(df: pd.DataFrame) -> pd.DataFrame:
    """The rows' attrib@value and its interval read as on the held-out split (`heldout.attrib@value`)."""
    return df.rename(columns={c: f"heldout.{c}" for c in ("attrib@value", "attrib@value_lo", "attrib@value_hi")})


IND, DIR, NL = "induction", "direct retrieval", "not learned"
CASES = {  # finding: (rows that reproduce it, rows that do not)
    "attention_induction": (runs(("attention", 1.0, IND, 1.0, 0.0, 0.0, 0.25)),
                            runs(("attention", 1.0, DIR, 0.0, 1.0, 0.0, 0.25))),
    "based_induction": (runs(("based", 0.99, IND, 0.95, 0.0, 0.0, 0.25)), runs(("based", 0.5, IND, 0.95, 0.0, 0.0, 0.25))),
    "mamba_direct": (runs(("mamba", 0.9, DIR, 0.0, 0.6, 0.4, 0.25)), runs(("mamba", 0.9, IND, 0.9, 0.0, 0.0, 0.25))),
    "mamba_noconv_fails": (runs(("mamba (d_conv 0)", 0.26, NL, 0.3, 0.0, 0.9, 0.25), ("mamba (d_conv 1)", 0.9, DIR, 0, 1, 0, 0.25)),
                           runs(("mamba (d_conv 0)", 0.9, DIR, 0, 1, 0, 0.25), ("mamba (d_conv 1)", 0.27, NL, 0, 0, 0, 0.25))),
    "mamba_conv1_fails": (runs(("mamba (d_conv 1)", 0.27, NL, 0, 0, 0, 0.25)), runs(("mamba (d_conv 1)", 0.9, DIR, 0, 1, 0, 0.25))),
    "based_long_fails": (runs(("based (d_conv long)", 0.25, NL, 0, 0, 0, 0.25)), runs(("based (d_conv long)", 0.9, IND, 1, 0, 0, 0.25))),
    "h3_hyena_poor": (runs(("h3", 0.02, NL, 0, 0, 0, 0.25), ("hyena", 0.3, DIR, 0, 1, 0, 0.25)),
                      runs(("h3", 0.93, DIR, 0, 0.3, 0.6, 0.25), ("hyena", 0.3, DIR, 0, 1, 0, 0.25))),
    "atr_storage": (with_ci(runs(("attention", 0.8, IND, 1.0, 0, 0, 0.05), ("based", 0.8, IND, 0.95, 0, 0, 0.05),
                                 ("mamba", 0.9, DIR, 0.01, 0.4, 0.6, 0.05), ("h3", 0.8, DIR, 0.03, 0.5, 0.5, 0.05),
                                 ("hyena", 0.7, DIR, 0.02, 0.5, 0.5, 0.05))),
                    with_ci(runs(("attention", 0.8, IND, 1.0, 0, 0, 0.05), ("mamba", 0.9, "mixed", 0.5, 0.2, 0.3, 0.05)))),
    "atr_heldout_storage": (on_heldout(with_ci(runs(("attention", 0.8, IND, 1.2, 0, 0, 0.05), ("based", 0.8, IND, 0.9, 0, 0, 0.05),
                                                   ("mamba", 0.9, DIR, 0.01, 0.4, 0.6, 0.05), ("h3", 0.8, DIR, 0.03, 0.5, 0.5, 0.05),
                                                   ("hyena", 0.7, DIR, 0.02, 0.5, 0.5, 0.05)))),
                            on_heldout(with_ci(runs(("attention", 0.8, IND, 0.3, 0, 0, 0.05))))),
    "one_layer_fails": (runs(*((f"{a} (1 layer)", 0.05, NL, 0, 0, 0, 0.0) for a in DEPTH_ZOO if a != "mamba")),
                        runs(("attention (1 layer)", 0.05, NL, 0, 0, 0, 0.0), ("based (1 layer)", 0.9, IND, 1, 0, 0, 0.0))),
    "one_layer_mamba": (runs(("mamba (1 layer)", 0.85, DIR, 0, 1, 0, 0.0)), runs(("mamba (1 layer)", 0.3, NL, 0, 0, 0, 0.0))),
    "three_layers_learn": (runs(("attention (3 layers)", 1.0, IND, 1, 0, 0, 0.0), ("based (3 layers)", 0.99, IND, 1, 0, 0, 0.0)),
                           runs(("attention (3 layers)", 1.0, IND, 1, 0, 0, 0.0), ("based (3 layers)", 0.5, IND, 1, 0, 0, 0.0))),
    "attention_needs_positions": (runs(("attention (no positions)", 0.06, NL, 0, 0, 0, 0.0)),
                                  runs(("attention (no positions)", 0.95, DIR, 0, 1, 0, 0.0))),
    "based_with_positions": (runs(("based (positions)", 0.93, IND, 1, 0, 0, 0.0)), runs(("based (positions)", 0.2, NL, 0, 0, 0, 0.0))),
    "atr_one_layer_convs": (runs(("based (1 layer)", 0.5, IND, 1, 0, 0, 0.05), ("baseconv (1 layer)", 0.52, DIR, 0, 1, 0, 0.05)),
                            runs(("based (1 layer)", 0.9, IND, 1, 0, 0, 0.05))),
    "atr_one_layer_mamba": (runs(("mamba (1 layer)", 0.9, DIR, 0, 1, 0, 0.05)), runs(("mamba (1 layer)", 0.6, DIR, 0, 1, 0, 0.05))),
    "atr_mamba_noconv_induction": (with_ci(runs(("mamba (d_conv 0)", 0.9, "mixed", 0.62, 0.26, 0.2, 0.05))),
                                   with_ci(runs(("mamba (d_conv 0)", 0.9, DIR, 0.1, 0.6, 0.3, 0.05)))),
}


def test_every_finding_has_a_case():
    """atr_mamba_vs_attention reads per-example tables: tests/report/test_paired.py."""
    assert set(CASES) | {"mamba_conv_forms", "atr_mamba_vs_attention"} == set(FINDINGS)


def test_atr_storage_is_inconclusive_where_an_interval_straddles():
    rows = with_ci(runs(("attention", 0.9, IND, 0.82, 0, 0, 0.05), ("mamba", 0.9, DIR, 0.01, 0.4, 0.6, 0.05)))
    assert FINDINGS["atr_storage"].check(rows).status == "inconclusive"  # attention's @value [0.77, 0.87]


def test_atr_storage_is_inconclusive_until_every_named_architecture_ran():
    reproduced, _ = CASES["atr_storage"]
    outcome = FINDINGS["atr_storage"].check(reproduced[reproduced["arch"] != "hyena"])
    assert outcome.status == "inconclusive" and outcome.evidence.endswith("not run: hyena")
    assert FINDINGS["atr_storage"].check(reproduced).status == "reproduced"


def test_the_held_out_storage_claim_reads_the_held_out_split_not_the_test_split():
    rows = with_ci(runs(("attention", 0.8, IND, 1.0, 0, 0, 0.05)))  # @value high on the test split only
    assert FINDINGS["atr_heldout_storage"].check(rows).status == "inconclusive"  # no held-out readout: undecided
    held = rows.assign(**{"heldout.attrib@value": 0.2, "heldout.attrib@value_lo": 0.1, "heldout.attrib@value_hi": 0.3})
    outcome = FINDINGS["atr_heldout_storage"].check(held)
    assert outcome.status == "not reproduced" and "attention seed 0 held-out @value 0.20 [0.10, 0.30]" in outcome.evidence


def test_a_claim_about_atr_easy_reads_only_the_easy_runs():
    """A pool holding large-vocabulary runs beside easy ones: the 1-layer Mamba claim (ATR easy) reads the easy
    run and leaves the other grammar's out; a claim about ATR as a whole reads both."""
    rows = runs(("mamba (1 layer)", 0.9, DIR, 0, 1, 0, 0.05), ("mamba (1 layer)", 0.5, DIR, 0, 1, 0, 0.05))
    rows["task.params.grammar"] = ["easy", "large_vocab"]
    outcome = FINDINGS["atr_one_layer_mamba"].check(rows)
    assert outcome.status == "reproduced" and outcome.evidence.startswith("1 of 1 runs pass")
    storage = with_ci(runs(("mamba", 0.9, DIR, 0.01, 0.4, 0.6, 0.05), ("mamba", 0.9, IND, 0.9, 0, 0, 0.05)))
    storage["task.params.grammar"] = ["easy", "large_vocab"]
    outcome = FINDINGS["atr_storage"].check(storage)
    assert outcome.status == "not reproduced" and "mamba seed 0 on large_vocab @value 0.90" in outcome.evidence


def test_near_chance_is_a_binomial_test_not_a_multiple_of_chance():
    fails = FINDINGS["mamba_noconv_fails"].check
    assert fails(runs(("mamba (d_conv 0)", 0.27, NL, 0, 0, 0, 0.25))).status == "reproduced"
    assert fails(runs(("mamba (d_conv 0)", 0.45, NL, 0, 0, 0, 0.25))).status == "not reproduced"  # 2x chance passed before
    outside = runs(("mamba (d_conv 0)", 0.45, NL, 0, 0, 0, 0.25)).assign(acc_outside=0.26, n_outside=256)
    assert fails(outside).status == "reproduced"  # read outside the conv reach where intervened on


def _conv_run(path, restores: float, cut_acc: float):
    path.mkdir()
    pd.DataFrame({"layer": [1, 1], "site": ["conv_out", "conv_out"], "offset": [1, 3], "joint": [False, False],
                  "direction": "sufficiency", "attrib": [0.1, restores], "attrib_lo": [0.0, restores - 0.1],
                  "attrib_hi": [0.2, restores + 0.1]}).to_parquet(path / "conv_window.parquet")
    pd.DataFrame({"layers": ["none", "1"], "lags": ["none", ">=1"], "acc": [0.97, cut_acc], "acc_lo": 0.0,
                  "acc_hi": 1.0, "n": 384}).to_parquet(path / "conv_ablation.parquet")
    return str(path)


def test_mamba_conv_forms_needs_the_cell_and_the_ablation(tmp_path):
    check = FINDINGS["mamba_conv_forms"].check
    row = runs(("mamba", 0.97, DIR, 0.0, 0.2, 0.6, 0.25))
    assert check(row.assign(run_dir=_conv_run(tmp_path / "a", 0.7, 0.24))).status == "reproduced"  # [0.6, 0.8]
    result = check(row.assign(run_dir=_conv_run(tmp_path / "b", 0.7, 0.55)))  # ablation leaves it well above chance
    assert result.status == "not reproduced" and "key+3 restores 0.70" in result.evidence
    assert check(row.assign(run_dir=_conv_run(tmp_path / "c", 0.3, 0.24))).status == "not reproduced"
    assert check(row.assign(run_dir=str(tmp_path / "none"))).status == "not run"


def test_mamba_conv_forms_is_inconclusive_where_the_interval_spans_the_threshold(tmp_path):
    """0.48 or 0.52 with the interval [.., ..] across 0.5 decides nothing (the make-run Mamba reads both, by
    build); one run clearly below it (or failing the ablation) outweighs another run's span."""
    check = FINDINGS["mamba_conv_forms"].check
    row = runs(("mamba", 0.97, DIR, 0.0, 0.2, 0.6, 0.25))
    for name, restores in (("below", 0.48), ("above", 0.52)):
        assert check(row.assign(run_dir=_conv_run(tmp_path / name, restores, 0.02))).status == "inconclusive"
    two = pd.concat([row.assign(run_dir=_conv_run(tmp_path / "span", 0.52, 0.02)),
                     row.assign(run_dir=_conv_run(tmp_path / "clear", 0.8, 0.02))])
    assert check(two).status == "inconclusive"
    two.iloc[1, two.columns.get_loc("run_dir")] = _conv_run(tmp_path / "low", 0.3, 0.02)
    assert check(two).status == "not reproduced"


@pytest.mark.parametrize("finding", list(CASES))
def test_finding_reproduces_only_where_the_rows_show_it(finding):
    shows, breaks = CASES[finding]
    check = FINDINGS[finding].check
    assert check(shows).status == "reproduced"
    assert check(breaks).status == "not reproduced"
    assert check(runs(("deltanet", 1.0, DIR, 0, 0, 1, 0.25))).status == "not run"


def test_a_claim_about_several_architectures_is_not_reproduced_by_some_of_them():
    """Attention with 3 layers learning does not reproduce "attention and Based learn with 3 layers" alone."""
    check = FINDINGS["three_layers_learn"].check
    result = check(runs(("attention (3 layers)", 1.0, IND, 1, 0, 0, 0.0)))
    assert result.status == "inconclusive" and "not run: based (3 layers)" in result.evidence
    assert check(runs(("based (3 layers)", 0.5, IND, 1, 0, 0, 0.0))).status == "not reproduced"  # a failure decides


def test_failing_is_decided_by_the_accuracy_interval():
    rows = runs(("attention (no positions)", 0.4, NL, 0, 0, 0, 0.0))
    assert FINDINGS["attention_needs_positions"].check(rows.assign(acc_all=0.4, acc_all_lo=0.36, acc_all_hi=0.44, n_all=512)).status == "inconclusive"
    assert FINDINGS["attention_needs_positions"].check(rows.assign(acc_all=0.1, acc_all_lo=0.08, acc_all_hi=0.13, n_all=512)).status == "reproduced"


def test_depth_and_position_variants_are_compared_with_their_own_published_accuracy():
    from mecheval.report.compare import published_accuracy

    assert published_accuracy("ar", None, "mamba", None, 64, "mamba (1 layer)") == 0.83
    assert published_accuracy("ar", None, "mamba", None, 64, "mamba") == 258 / 320  # 2 layers, the main table (80.62%)
    assert published_accuracy("ar", None, "based", None, 64, "based (positions)") == 0.91
    assert published_accuracy("ar", None, "deltanet", None, 64, "deltanet (3 layers)") is None  # not stated
    assert published_accuracy("atr", "easy", "baseconv", None, 64, "baseconv (1 layer)") == 0.51


def test_a_claim_of_high_accuracy_reads_the_widths_where_the_published_accuracy_is_high():
    """Attention fails AR at d = 16 in the study too (.07): "attention reaches high AR accuracy by induction"
    is not about that width, so a failed d = 16 run leaves it reproduced at d = 64, and says it was left out."""
    rows = runs(("attention", 1.0, IND, 1.0, 0.0, 0.0, 0.25), ("attention", 0.05, NL, 0, 0, 0, 0.25)).assign(
        **{"model.d_model": [64, 16], "task.name": "ar", "arch_name": "attention", "arch_conv": None})
    outcome = FINDINGS["attention_induction"].check(rows)
    assert outcome.status == "reproduced" and "left out" in outcome.evidence and "attention at d = 16" in outcome.evidence
    assert FINDINGS["attention_induction"].check(rows.iloc[[1]]).status == "not run"
    at_32 = rows.iloc[[1]].assign(**{"model.d_model": 32})  # published 1.0 there: the failure counts
    assert FINDINGS["attention_induction"].check(at_32).status == "not reproduced"
    # a claim of failure reads every width
    assert FINDINGS["h3_hyena_poor"].where_learned is False


def test_a_claim_about_accuracy_and_mechanism_says_which_half_failed():
    """Mamba at 0.65 by direct retrieval, as published: the accuracy fails, the mechanism holds."""
    rows = runs(("mamba", 0.65, DIR, 0.0, 0.6, 0.4, 0.25))
    outcome = FINDINGS["mamba_direct"].check(rows)
    assert outcome.status == "not reproduced"
    assert outcome.parts == {"accuracy": "not reproduced", "mechanism": "reproduced"}
    assert outcome.words() == "not reproduced (accuracy: not reproduced, mechanism: reproduced; 0 of 1 seed)"
    wrong = FINDINGS["mamba_direct"].check(runs(("mamba", 0.95, IND, 0.9, 0.0, 0.0, 0.25)))
    assert wrong.parts == {"accuracy": "reproduced", "mechanism": "not reproduced"}
    assert FINDINGS["h3_hyena_poor"].check(CASES["h3_hyena_poor"][0]).parts == {}  # a claim of one part


def test_each_finding_counts_the_seeds_that_reproduce_it():
    rows = pd.concat([runs(("attention", 1.0, IND, 1.0, 0, 0, 0.25)).assign(seed=s) for s in (0, 1, 2)], ignore_index=True)
    assert FINDINGS["attention_induction"].check(rows).seed_share() == "3 of 3 seeds"
    rows.loc[1, "verdict"] = DIR  # seed 1 retrieves at the query
    outcome = FINDINGS["attention_induction"].check(rows)
    assert outcome.status == "not reproduced" and outcome.seeds == {0: "reproduced", 1: "not reproduced", 2: "reproduced"}
    assert outcome.seed_share() == "2 of 3 seeds"
    both = CASES["h3_hyena_poor"][0].assign(seed=[0, 1])  # a claim about two architectures: each seed needs both
    assert FINDINGS["h3_hyena_poor"].check(both).seeds == {0: "inconclusive", 1: "inconclusive"}


def test_an_atr_claim_naming_no_grammar_is_read_per_grammar():
    """Three easy seeds reproduce the twist; a large-vocabulary seed that never learned the grammar does not
    overturn them: each grammar is its own outcome."""
    easy = pd.concat([with_ci(runs(("mamba (d_conv 0)", 0.95, "mixed", 0.82, 0.27, 0.1, 0.05))).assign(seed=s)
                      for s in (0, 1, 2)])
    lv = with_ci(runs(("mamba (d_conv 0)", 0.65, NL, 0.1, 0.1, 0.1, 0.05)))
    rows = pd.concat([easy.assign(**{"task.params.grammar": "easy"}), lv.assign(**{"task.params.grammar": "large_vocab"})],
                     ignore_index=True).assign(**{"task.name": "atr"})
    each = FINDINGS["atr_mamba_noconv_induction"].check_each(rows)
    assert {g: o.status for g, o in each.items()} == {"on easy": "reproduced", "on large_vocab": "not reproduced"}
    assert each["on easy"].seed_share() == "3 of 3 seeds"
    overall = FINDINGS["atr_mamba_noconv_induction"].check(rows)
    assert overall.status == "not reproduced" and overall.parts["on easy"].startswith("reproduced")
    assert FINDINGS["atr_mamba_noconv_induction"].check_each(rows.iloc[:1]).keys() == {"on easy"}  # one grammar, named
    assert FINDINGS["mamba_direct"].check_each(CASES["mamba_direct"][0]).keys() == {""}  # AR: no grammar


def test_a_claim_whose_runs_span_widths_is_read_per_width():
    """Induction at d = 64 and direct retrieval at d = 128: each width its own outcome, in reading order, and the
    claim as read at each width names it; one width alone is read as a whole."""
    rows = runs(("attention", 1.0, IND, 1.0, 0.0, 0.0, 0.25), ("attention", 1.0, DIR, 0.0, 1.0, 0.0, 0.25),
                ("attention", 1.0, IND, 1.0, 0.0, 0.0, 0.25)).assign(
        **{"model.d_model": [128, 128, 64], "task.name": "ar", "arch_name": "attention", "arch_conv": None})
    each = FINDINGS["attention_induction"].check_each(rows)
    assert list(each) == ["at d = 64", "at d = 128"]
    assert each["at d = 64"].status == "reproduced" and each["at d = 128"].status == "not reproduced"
    overall = FINDINGS["attention_induction"].check(rows)
    assert overall.status == "not reproduced" and overall.parts["at d = 64"].startswith("reproduced")
    assert [c for _, c, _ in checked(["attention_induction"], rows)][0].endswith("(at d = 64).")
    assert FINDINGS["attention_induction"].check_each(rows.iloc[[2]]).keys() == {""}


def test_the_atr_twist_is_stated_as_measured():
    """The shares at the value and at the query with their intervals, our own label beside the published criterion."""
    row = with_ci(runs(("mamba (d_conv 0)", 0.95, "mixed", 0.82, 0.27, 0.1, 0.05)))
    row = row.assign(**{"attrib@query_lo": 0.2, "attrib@query_hi": 0.34})
    outcome = FINDINGS["atr_mamba_noconv_induction"].check(row)
    assert outcome.status == "reproduced" and outcome.parts == {"accuracy": "reproduced", "mechanism": "reproduced"}
    assert ("@value 0.82 [0.77, 0.87], @query 0.27 [0.20, 0.34]; our label: mixed, published criterion @value >= 0.5: met"
            in outcome.evidence)


def test_the_terminal_prints_each_finding_with_its_parts_and_share_of_seeds(tmp_path):
    from rich.console import Console

    from mecheval.report.analyse import summarise
    from mecheval.report.build import Report
    from mecheval.report.terminal import print_summary

    rows = runs(("mamba", 0.65, DIR, 0.0, 0.6, 0.4, 0.25)).assign(
        **{"best_lr": True, "optim.lr": 1e-3, "task.name": "ar", "arch_name": "mamba", "arch_conv": None,
           "effect": 0.5})
    outcome = FINDINGS["mamba_direct"].check(rows)
    console = Console(record=True, width=300)
    print_summary(Report(tmp_path / "report.md", tmp_path / "report.html", summarise(rows), "",
                         [(FINDINGS["mamba_direct"].claim, outcome)]), console)
    assert ("not reproduced (accuracy: not reproduced, mechanism: reproduced; 0 of 1 seed): Mamba (d_conv 4) reaches"
            in console.export_text())


def test_a_cell_over_seeds_reads_the_accuracy_every_seed_has():
    """A read that some seed lacks (no examples outside the conv reach) is not the cell's: the pooled accuracy
    falls back to the read every seed has, with its interval, and no seed's own value passes for the cell's."""
    rows = pd.concat([runs(("h3", a, NL, 0, 0, 0, 0.25)).assign(seed=s) for s, a in ((0, 0.02), (1, 0.03), (2, 0.04))],
                     ignore_index=True)
    rows = rows.assign(acc_all=rows["acc"], acc_all_lo=rows["acc"] - 0.01, acc_all_hi=rows["acc"] + 0.01, n_all=512,
                       acc_outside=[0.5, float("nan"), float("nan")], acc_outside_lo=[0.4, None, None],
                       acc_outside_hi=[0.6, None, None], n_outside=[10, 0, 0])
    evidence = FINDINGS["h3_hyena_poor"].check(rows).evidence
    assert "h3 d=64 over 3 seeds: acc 0.03 [" in evidence and "nan" not in evidence
