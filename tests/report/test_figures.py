"""The annotated "how to read this" heatmap stays legible however many positions the table patches."""

import itertools

import numpy as np
import pandas as pd
import pytest

from mecheval.report.figures import howto_figure

POSITIONS = ["key", "value", "key+2", "key+3", "sep", "query", "key&query", "value&key+2"]


def _table(positions: list[str]) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"corrupt": "key", "direction": "sufficiency", "site": "resid_pre", "layer": layer,
                          "position": p, "attrib": float(rng.uniform(0, 1)), "subset": "outside"}
                         for layer in (0, 1) for p in positions])


@pytest.mark.parametrize("n", [4, len(POSITIONS)])
def test_tick_labels_and_cell_values_do_not_overlap(n):
    fig = howto_figure(_table(POSITIONS[:n]), "mamba")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
    assert len(ticks) == n
    assert not any(a.overlaps(b) for a, b in itertools.combinations(ticks, 2))  # no "keyvaluesepquery"
    values = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(values) == 2 * n
    assert not any(a.overlaps(b) for a, b in itertools.combinations(values, 2))
    assert "read here" in ax.get_xlabel()
