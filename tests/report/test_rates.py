"""Learning-rate sensitivity and coverage of the published tables (`report.rates`)."""

from __future__ import annotations

import pandas as pd
import pytest

from pages.rates import bracket_table, coverage_summary, coverage_table, published_cells, rate_figure, rate_table


def _runs(rows):
    """Finished runs as `committed_runs` gives them: (arch, width, lr, seed, acc, verdict)."""
    return pd.DataFrame([{"task.name": "ar", "grammar": "", "arch": arch, "arch_name": arch.split(" ")[0],
                          "arch_conv": None, "model.d_model": w, "optim.lr": lr, "seed": seed, "acc": acc,
                          "eval.size": 1024, "verdict": verdict} for arch, w, lr, seed, acc, verdict in rows])


def test_a_best_rate_is_bracketed_only_with_a_worse_rate_on_each_side():
    runs = _runs([("mamba", 32, 3e-3, 0, 0.23, "direct retrieval"), ("mamba", 32, 1e-2, 0, 0.59, "direct retrieval"),
                  ("based", 32, 3e-4, 0, 0.29, "induction"), ("based", 32, 1e-3, 0, 0.71, "induction"),
                  ("based", 32, 3e-3, 0, 0.50, "induction")])
    table = rate_table(runs).set_index(["arch", "lr"])
    assert table.loc[("mamba", 1e-2), "best"] and not table.loc[("mamba", 1e-2), "bracketed"]  # best at the edge
    assert table.loc[("based", 1e-3), "best"] and table.loc[("based", 1e-3), "bracketed"]
    assert table.loc[("based", 1e-3), "rates"] == 3 and table.loc[("mamba", 1e-2), "published"] == 246 / 320


def test_the_best_rate_is_chosen_on_the_seeds_every_rate_ran_as_the_findings_choose_it():
    runs = _runs([("mamba", 64, 3e-3, 0, 0.74, "direct retrieval"), ("mamba", 64, 1e-2, 0, 0.77, "direct retrieval"),
                  ("mamba", 64, 1e-2, 1, 0.70, "direct retrieval"), ("mamba", 64, 1e-2, 2, 0.00, "not learned")])
    table = rate_table(runs).set_index("lr")
    assert table.loc[1e-2, "best"] and table.loc[1e-2, "seeds"] == 3 and not table.loc[3e-3, "best"]
    [apart] = bracket_table(rate_table(runs)).to_dict("records")  # the best has the lower mean: its seeds say why
    assert apart["rates tried"] == "0.003: 0.74, **0.01: 0.49 ×3**"


def test_seeds_of_one_rate_are_averaged_with_a_multi_bootstrap_interval():
    runs = _runs([("attention", 64, 1e-3, s, acc, v) for s, acc, v in
                  ((0, 1.0, "induction"), (1, 0.03, "not learned"), (2, 1.0, "induction"))])
    [row] = rate_table(runs).to_dict("records")
    assert row["seeds"] == 3 and row["acc"] == pytest.approx(0.677, abs=1e-3)
    assert row["acc_lo"] < 0.1 and row["acc_hi"] > 0.99  # the bimodal seeds: wide
    assert row["verdict"] == "induction" and row["verdicts"] == "induction 2, not learned 1"


def test_coverage_counts_every_published_cell_and_compares_strictly():
    runs = _runs([("attention", 64, 1e-3, 0, 0.995, "induction"), ("mamba", 128, 1e-2, 0, 0.66, "direct retrieval")])
    coverage = coverage_table(rate_table(runs)).set_index(["task", "grammar", "arch", "width"])
    assert len(coverage) == len(published_cells()) > 200
    assert coverage.loc[("ar", "", "attention", 64), "comparison"] == "agree"
    assert coverage.loc[("ar", "", "mamba", 128), "comparison"] == "differ"  # 0.66 against .90
    assert coverage.loc[("ar", "", "attention", 32), "comparison"] == "not run"
    summary = coverage_summary(coverage.reset_index()).set_index("table")
    assert summary.loc["all", "compared"] == 2 and summary.loc["all", "agree"] == 1 and summary.loc["all", "differ"] == 1


def test_the_figure_draws_every_cell():
    runs = _runs([("mamba", 32, 3e-3, 0, 0.23, "direct retrieval"), ("mamba", 64, 1e-2, 0, 0.75, "direct retrieval")])
    fig = rate_figure(rate_table(runs))
    assert len(fig.axes[0].patches) == 2 + 2  # two cells, each best outlined


def test_cells_apart_from_the_study_say_which_part_differs():
    runs = _runs([("mamba", 128, 1e-2, 0, 0.66, "direct retrieval"),  # accuracy differs (.90), mechanism as published
                  ("attention", 64, 1e-3, 0, 0.995, "induction"),  # agrees: not listed
                  ("attention", 32, 1e-3, 0, 0.80, "direct retrieval"),  # 0.80 against 1.00: differs in both
                  ("mamba", 64, 1e-2, 0, 0.78, "direct retrieval"), ("mamba", 64, 3e-3, 0, 0.80, "direct retrieval")])
    apart = bracket_table(rate_table(runs)).set_index("cell")
    assert "AR attention d=64" not in apart.index
    assert apart.loc["AR mamba d=128", "differs in"] == "accuracy" and apart.loc["AR mamba d=128", "accuracy"] == "differ"
    assert apart.loc["AR mamba d=128", "mechanism"] == "direct retrieval (direct retrieval): agree"
    assert apart.loc["AR attention d=32", "differs in"] == "accuracy, mechanism"
    assert apart.loc["AR mamba d=64", "rates tried"] == "**0.003: 0.80**, 0.01: 0.78"  # the best in bold, at the edge
    assert apart.loc["AR mamba d=64", "bracketed"] == "no" and apart.loc["AR mamba d=64", "differs in"] == "–"


def test_a_seed_run_in_two_designs_counts_once():
    runs = _runs([("based", 64, 1e-3, 0, 0.94, "induction"), ("based", 64, 1e-3, 0, 0.92, "induction"),
                  ("based", 64, 1e-3, 1, 0.96, "induction")])  # seed 0 twice (two train orders), seed 1
    [row] = rate_table(runs).to_dict("records")
    assert row["seeds"] == 2


def test_runs_on_the_published_atr_grammar_are_not_seeds_of_our_cells():
    """A run trained on the published grammar itself checks the ATR offset; our cell's seeds are our draw's runs."""
    from pages.rates import committed_runs

    def table(seed, acc, draw):
        row = {"status": "done", "task.name": "atr", "task.params.grammar": "easy", "arch": "attention", "arch_name": "attention",
               "arch_conv": None, "model.d_model": 64, "optim.lr": 1e-3, "seed": seed, "acc": acc, "eval.size": 1024}
        return pd.DataFrame([row if draw is None else {**row, "task.params.grammar_draw": draw}])

    runs = committed_runs([table(0, 0.88, None), table(1, 0.87, "mecheval"), table(0, 0.89, "published")])
    assert sorted(runs["acc"]) == [0.87, 0.88] and set(runs["grammar"]) == {"easy"}


def test_a_held_out_cell_reads_the_published_generalisation_language_where_it_has_runs_there():
    """The published held-out accuracies are of the published generalisation language: a held-out cell with runs on
    it reads those alone (Based); one without reads our easy grammar's split (attention); the language is no
    seed of the easy cell, which has no held-out pairs."""
    from pages.rates import committed_runs

    def row(arch, lr, acc, draw, holdout=0.2):
        return {"status": "done", "task.name": "atr", "task.params.grammar": "easy", "arch": arch, "arch_name": arch,
                "arch_conv": None, "model.d_model": 64, "optim.lr": lr, "seed": 0, "acc": 0.9, "acc_heldout": acc,
                "eval.size": 1024, "task.params.holdout_frac": holdout, "task.params.grammar_draw": draw}

    runs = committed_runs([pd.DataFrame([
        row("based", 1e-3, 0.32, "mecheval"), row("based", 3e-3, 0.31, None), row("based", 1e-3, 0.41, "published-split-sets"),
        row("attention", 1e-3, 0.46, "mecheval"), row("attention", 1e-3, 0.59, "published-sets", holdout=0.0)])])
    assert sorted(zip(runs["arch"], runs["grammar"], runs["acc"])) == [
        ("attention", "easy held-out", 0.46), ("based", "easy held-out", 0.41)]
    assert rate_table(runs).set_index("arch").loc["based", "rates"] == 1


def test_runs_of_the_study_codes_build_are_not_seeds_of_our_cells_where_those_are_ours():
    """Attention built as the study's code builds it checks the ATR offset; Mamba's cells are of that build."""
    from pages.rates import committed_runs

    def row(preset, seed, acc, build):
        return {"status": "done", "task.name": "atr", "task.params.grammar": "easy", "arch": preset, "arch_name": preset,
                "arch_conv": None, "model.d_model": 64, "optim.lr": 1e-3, "seed": seed, "acc": acc, "eval.size": 1024,
                "model.preset": preset, "model.build": build}

    runs = committed_runs([pd.DataFrame([row("attention", 0, 0.88, "mecheval"), row("attention", 1, 0.87, None),
                                         row("attention", 0, 0.93, "study"), row("mamba", 0, 0.94, "study")])])
    assert sorted(zip(runs["arch"], runs["acc"])) == [("attention", 0.87), ("attention", 0.88), ("mamba", 0.94)]


def test_a_rate_whose_run_diverged_is_tried_and_worse_so_it_brackets_the_best():
    """Mamba on AR: 1e-2 learned best, 3e-2 diverged (no accuracy): the best, 1e-2, is bracketed."""
    from pages.rates import committed_runs

    def run(lr, acc, status):
        return {"status": status, "task.name": "ar", "arch": "mamba", "arch_name": "mamba",
                "arch_conv": None, "model.d_model": 64, "optim.lr": lr, "seed": 0, "acc": acc, "eval.size": 1024,
                "verdict": None if status == "diverged" else "direct retrieval"}

    runs = committed_runs([pd.DataFrame([run(3e-3, 0.86, "done"), run(1e-2, 0.9, "done"), run(3e-2, float("nan"), "diverged"),
                                         {**run(1e-1, float("nan"), "unfinished")}])])
    table = rate_table(runs).set_index("lr")
    assert list(table.index) == [3e-3, 1e-2, 3e-2]  # an unfinished run is no rate tried
    assert table.loc[1e-2, "best"] and table.loc[1e-2, "bracketed"] and table.loc[1e-2, "rates"] == 3
    assert table.loc[3e-2, "verdict"] == "diverged" and table.loc[3e-2, "acc"] != table.loc[3e-2, "acc"]
    assert coverage_table(rate_table(runs)).set_index(["task", "grammar", "arch", "width"]).loc[
        ("ar", "", "mamba", 64), "bracketed"]
    fig = rate_figure(rate_table(runs))
    assert "diverged" in [t.get_text() for t in fig.axes[0].texts]
    [apart] = bracket_table(rate_table(runs)).to_dict("records")  # 0.90 [0.88, 0.92] against .81
    assert apart["rates tried"] == "0.003: 0.86, **0.01: 0.90**, 0.03: diverged" and apart["bracketed"] == "yes"


def test_each_cell_apart_says_which_runs_would_settle_it_and_what_a_run_costs():
    runs = _runs([("mamba", 128, 1e-2, 0, 0.66, "direct retrieval"),  # one rate: the grid's rates on both sides
                  ("mamba", 32, 3e-3, 0, 0.23, "direct retrieval"), ("mamba", 32, 1e-2, 0, 0.58, "direct retrieval"),
                  ("mamba", 32, 3e-2, 0, 0.00, "not learned"),  # bracketed, differs (.77) on one seed: two more
                  ("based", 32, 3e-3, 0, 0.60, "induction"), ("based", 32, 1e-2, 0, 0.86, "induction")])  # edge: above
    runs["summary.cpu_time_s"] = [600.0, 300.0, 420.0, 360.0, None, None]
    runs["summary.wall_time_s"] = [700.0, 400.0, 500.0, 450.0, 900.0, 1020.0]
    apart = bracket_table(rate_table(runs)).set_index("cell")
    assert apart.loc["AR mamba d=128", "next"] == "lr 0.003, lr 0.03"
    assert apart.loc["AR mamba d=32", "next"] == "2 more seeds at lr 0.01"
    assert apart.loc["AR based d=32", "next"] == "lr 0.03"
    assert apart.loc["AR mamba d=128", "min a run"] == "10"  # CPU minutes where recorded
    assert apart.loc["AR mamba d=32", "min a run"] == "6"  # the median over its rates (5, 7, 6)
    assert apart.loc["AR based d=32", "min a run"] == "16 wall"  # none recorded CPU time: wall minutes, marked


def test_a_best_rate_at_the_grid_s_end_is_bracketed_by_it_and_asks_for_seeds_where_it_differs():
    runs = _runs([("mamba", 64, 1e-2, 0, 0.20, "direct retrieval"), ("mamba", 64, 3e-2, 0, 0.40, "direct retrieval")])
    [apart] = bracket_table(rate_table(runs)).to_dict("records")
    assert apart["bracketed"] == "yes" and apart["next"] == "2 more seeds at lr 0.03" and apart["min a run"] == "–"


def test_each_cell_apart_names_the_studies_that_made_its_runs_by_rate():
    runs = _runs([("mamba", 128, 1e-2, 0, 0.66, "direct retrieval"), ("mamba", 128, 3e-3, 0, 0.60, "direct retrieval"),
                  ("mamba", 128, 1e-2, 1, 0.64, "direct retrieval")])
    runs["study"] = ["d128/first", "d128/lr3e-3", "d128/seeds"]
    [apart] = bracket_table(rate_table(runs), link=lambda study: f"<{study}>").to_dict("records")
    assert apart["studies"] == "<d128/lr3e-3>, <d128/first>, <d128/seeds>"  # by rate, each study once, as linked


def test_the_best_rate_is_one_the_study_swept_for_the_table_and_a_grid_end_brackets_it():
    """ATR was swept up to 3e-3 (`published.swept_rates`): a better 1e-2 is shown, faded, and not compared; a best at
    3e-3 with a worse rate below is bracketed, since nothing the study swept lies above it."""
    runs = _runs([("mamba", 64, 1e-3, 0, 0.89, "direct retrieval"), ("mamba", 64, 3e-3, 0, 0.93, "direct retrieval"),
                  ("mamba", 64, 1e-2, 0, 0.95, "direct retrieval"),
                  ("attention", 64, 3e-3, 0, 0.90, "induction"), ("attention", 64, 1e-2, 0, 0.92, "induction")])
    runs[["task.name", "grammar"]] = ["atr", "easy"]
    table = rate_table(runs).set_index(["arch", "lr"])
    assert table.loc[("mamba", 3e-3), "best"] and not table.loc[("mamba", 1e-2), "best"]
    assert table.loc[("mamba", 3e-3), "bracketed"] and table.loc[("mamba", 3e-3), "rates"] == 2
    assert not table.loc[("mamba", 1e-2), "swept"] and table.loc[("mamba", 3e-3), "swept"]
    apart = bracket_table(rate_table(runs)).set_index("cell")
    assert apart.loc["ATR easy attention d=64", "rates tried"] == "**0.003: 0.90**, 0.01 (not swept): 0.92"
    assert apart.loc["ATR easy attention d=64", "next"] == "lr 0.001"  # not 1e-2: the study's grid ends at 3e-3
    fig = rate_figure(rate_table(runs))
    assert sorted({p.get_alpha() for p in fig.axes[0].patches if p.get_fill()}) == [0.35, 1.0]


def test_the_grid_follows_the_study_s_sweep_per_table():
    from mecheval.report.published import swept_rates

    assert swept_rates("ar", "mamba (d_conv 2)")[-1] == 3e-2 and swept_rates("ar", "attention (1 layer)")[-1] == 3e-2
    assert swept_rates("ar", "based (d_conv 2)")[-1] == swept_rates("ar", "based (positions)")[-1] == 3e-3
    assert swept_rates("atr", "mamba")[-1] == 3e-3 and len(swept_rates("ar", "hyena")) == 7
