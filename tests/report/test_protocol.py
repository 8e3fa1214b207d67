"""The published reading simulated from our runs (`pages.protocol`): the maximum over the study's swept rates of
one run's accuracy on 320 test examples."""

from __future__ import annotations

import pandas as pd
import pytest

from pages.protocol import CONSISTENT, HIGHER, LOWER, OPEN, joint_lower, protocol_table
from pages.rates import rate_table


def _rates(rows, task="atr"):
    """`rate_table` of finished runs (arch, width, lr, seed, acc) on ATR easy (or AR), 1,024 test examples each."""
    return rate_table(pd.DataFrame([{"task.name": task, "grammar": "easy" if task == "atr" else "", "arch": arch,
                                     "arch_name": arch.split(" ")[0], "model.d_model": w,
                                     "arch_conv": int(arch[-2]) if arch.startswith("mamba (d_conv") else None,
                                     "optim.lr": lr, "seed": seed, "acc": acc, "eval.size": 1024, "verdict": "induction"}
                                    for arch, w, lr, seed, acc in rows]))


def test_runs_at_the_published_value_read_it_and_a_far_lower_bracketed_cell_reads_lower():
    table = protocol_table(_rates([("attention", 64, 1e-3, 0, 0.94),  # published .94
                                   ("based", 64, 3e-4, 0, 0.60), ("based", 64, 1e-3, 0, 0.70),
                                   ("based", 64, 3e-3, 0, 0.65),  # bracketed at 1e-3, far under .92
                                   ("h3", 64, 1e-3, 0, 0.70)])).set_index("arch")  # far under .90, one rate: open
    assert table.at["attention", "outcome"] == CONSISTENT and table.at["attention", "median"] == pytest.approx(0.94, abs=0.01)
    assert table.at["attention", "p_at_least"] > 0.3 and table.at["attention", "p_at_most"] > 0.3
    assert table.at["based", "outcome"] == LOWER and table.at["based", "p_at_least"] < 0.001
    assert table.at["h3", "outcome"] == OPEN  # an untried rate might read higher


def test_a_cell_reading_above_the_published_value_is_higher_whatever_was_left_untried():
    [row] = protocol_table(_rates([("mamba", 16, 1e-2, 0, 0.40)], task="ar")).to_dict("records")  # published .10
    assert row["outcome"] == HIGHER and row["p_at_most"] < 0.001


def test_the_maximum_over_rates_reads_higher_than_one_rate_and_a_rate_the_study_did_not_sweep_is_not_used():
    one = protocol_table(_rates([("attention", 64, 1e-3, 0, 0.90)])).iloc[0]
    three = protocol_table(_rates([("attention", 64, lr, 0, 0.90) for lr in (3e-4, 1e-3, 3e-3)])).iloc[0]
    assert three["median"] > one["median"] + 0.005 and three["p_at_least"] > one["p_at_least"]
    beyond = protocol_table(_rates([("attention", 64, 1e-3, 0, 0.90), ("attention", 64, 1e-2, 0, 0.99)])).iloc[0]
    assert beyond["rates"] == "0.001" and beyond["median"] == one["median"]  # ATR was swept up to 3e-3 only


def test_seeds_of_a_rate_are_drawn_from_and_the_numbers_are_the_same_each_time_and_per_cell():
    runs = [("attention", 64, 1e-3, s, a) for s, a in ((0, 0.80), (1, 0.95))] + [("mamba", 64, 3e-3, 0, 0.93)]
    first, again = protocol_table(_rates(runs)), protocol_table(_rates(runs))
    pd.testing.assert_frame_equal(first, again)
    assert first.set_index("arch").at["attention", "rates"] == "0.001 ×2"
    assert first.set_index("arch").at["attention", "lo"] < 0.82 and first.set_index("arch").at["attention", "hi"] > 0.93
    alone = protocol_table(_rates(runs[2:]))
    assert alone.iloc[0]["p_at_least"] == first.set_index("arch").at["mamba", "p_at_least"]  # its own generator


def test_cells_each_near_the_edge_together_read_lower():
    table = protocol_table(_rates([(arch, 64, lr, 0, acc - drop) for arch, acc in (("attention", 0.915), ("mamba", 0.935))
                                   for lr, drop in ((1e-3, 0.03), (3e-3, 0.0))]))  # bracketed: 1e-3 and the grid's end
    assert (table["outcome"] == CONSISTENT).all()
    cells, p = joint_lower(table)
    assert cells == 2 and p < table["p_at_least"].min()


def test_a_published_upper_bound_agrees_with_any_reading_below_it():
    [row] = protocol_table(_rates([("mamba (d_conv 0)", 64, 1e-2, 0, 0.0)], task="ar")).to_dict("records")  # ≤ .06
    assert row["bound"] and row["p_at_least"] == 1.0 and row["outcome"] == CONSISTENT
    [row] = protocol_table(_rates([("mamba (d_conv 0)", 64, 1e-2, 0, 0.5)], task="ar")).to_dict("records")
    assert row["outcome"] == HIGHER


def test_a_held_out_cell_is_not_simulated():
    rates = _rates([("attention", 64, 1e-3, 0, 0.60)])
    rates["grammar"] = "easy held-out"
    assert protocol_table(rates).empty  # published at the rate best on the in-distribution split, not its own maximum
