"""The annotated "how to read this" heatmap stays legible however many positions the table patches."""

import itertools

import matplotlib.pyplot as plt

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


def test_the_study_figure_is_one_legible_figure_per_task_and_scale():
    """Each (task, scale) a figure of its own, no wider than the docs' column at 96 dpi, every text >= 9 pt
    (12 px at 96 dpi), and no two tick labels of a panel overlapping."""
    from matplotlib.text import Text

    from pages.study_figure import groups, study_panels

    rows = [{"task": t, "scale": s, "arch": a, "quantity": q, "source": src, "value": v, "run": ""}
            for t, s in (("ar", "paper-d64"), ("atr", "cpu")) for a in ("attention", "mamba (d_conv 0)", "based")
            for q in ("accuracy", "@key", "@value", "@query") for src, v in (("ours", 0.5), ("published", 0.9))]
    data = pd.DataFrame(rows)
    assert groups(data) == [("ar", "paper-d64"), ("atr", "cpu")]
    fig = study_panels(data, "ar", "paper-d64")
    fig.canvas.draw()
    assert fig.get_figwidth() * 96 <= 700
    texts = [t for t in fig.findobj(Text) if t.get_text() and t.get_visible()]
    assert min(t.get_fontsize() for t in texts) >= 9
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.get_yticklabels() + ax.get_xticklabels() if t.get_text()]
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    plt.close(fig)
