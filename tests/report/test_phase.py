"""The phase diagram: the share of each verdict over seeds per (architecture, width, rate), drawn as a grid."""

from pathlib import Path

import pandas as pd
import pytest
from matplotlib.patches import Rectangle

from mecheval.report.phase import NOT_READ, VERDICTS, phase_figure, phase_table

QUICK = Path(__file__).resolve().parents[2] / "results" / "cpu" / "quick"


def runs(rows: list[tuple]) -> pd.DataFrame:
    """A runs table as `study_table` gives it: (arch, width, lr, seed, verdict, acc, best_lr, status)."""
    columns = ["arch", "model.d_model", "optim.lr", "seed", "verdict", "acc", "best_lr", "status"]
    return pd.DataFrame(rows, columns=columns)


SYNTHETIC = runs([
    ("attention", 16, 1e-3, 0, "induction", 0.9, True, "done"),
    ("attention", 16, 1e-3, 1, "induction", 0.8, True, "done"),
    ("attention", 16, 1e-3, 2, "positional pointer", 0.7, True, "done"),
    ("attention", 16, 3e-3, 0, "not learned", 0.1, False, "done"),
    ("attention", 16, 3e-3, 1, None, 0.2, False, "done"),  # finished, never read
    ("attention", 16, 3e-3, 2, "induction", 0.3, False, "running"),  # unfinished: not counted
    ("attention", 32, 3e-3, 0, "induction", 1.0, True, "done"),
    ("mamba", 32, 1e-3, 0, "direct retrieval", 0.6, True, "done"),
])


def test_shares_are_over_the_finished_seeds_of_each_cell():
    table = phase_table(SYNTHETIC).set_index(["arch", "width", "lr"])
    assert len(table) == 4  # (attention, 32, 1e-3) and the others never run are not rows
    first = table.loc[("attention", 16, 1e-3)]
    assert first["seeds"] == 3 and first["induction"] == pytest.approx(2 / 3)
    assert first["positional pointer"] == pytest.approx(1 / 3) and first["majority"] == "induction"
    assert first["majority_share"] == pytest.approx(2 / 3) and first["acc"] == pytest.approx(0.8) and first["best"]
    second = table.loc[("attention", 16, 3e-3)]
    assert second["seeds"] == 2 and second["not learned"] == 0.5 and second[NOT_READ] == 0.5 and not second["best"]
    assert table[list(VERDICTS)].sum(axis=1).tolist() == pytest.approx([1.0] * 4)


def test_a_cell_without_runs_is_left_blank():
    table = phase_table(SYNTHETIC)
    fig = phase_figure(table)
    attention, mamba = fig.axes[:2]
    lrs, widths = [1e-3, 3e-3], [16, 32]
    def filled(ax, lr, width):  # a coloured segment whose box lies in the cell
        x, y = lrs.index(lr), widths.index(width)
        return [p for p in ax.patches if isinstance(p, Rectangle) and p.get_fill()
                and abs(p.get_y() + 0.4 - y) < 1e-9 and x - 0.5 <= p.get_x() < x + 0.5]
    assert len(filled(attention, 1e-3, 16)) == 2  # induction and positional pointer
    assert filled(attention, 1e-3, 32) == [] and filled(mamba, 3e-3, 32) == [] and filled(mamba, 1e-3, 16) == []
    assert len(filled(mamba, 1e-3, 32)) == 1


def test_a_committed_study_draws():
    if not QUICK.exists():
        pytest.skip("the committed quick study is not in this checkout")
    from mecheval.report.results import study_table

    table = phase_table(study_table(QUICK))
    assert set(table["seeds"]) == {3} and table["best"].all()  # one rate per architecture, 3 seeds each
    assert len(phase_figure(table).axes) == len(table["arch"].unique())
