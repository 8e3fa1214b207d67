"""Plots as a library: Axes/Figure in and out, no backend set at import, the subset shown named."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from matplotlib.figure import Figure

from mecheval.interventions.plots import attrib_grid, conv_window_heatmap, heatmap, layer_profile


def table() -> pd.DataFrame:
    rows = []
    for subset, n, scale in (("all", 64, 1.0), ("outside", 40, 0.5)):
        for layer in (0, 1):
            for site in ("resid_pre", "resid_post"):
                for pos in ("key", "value", "query"):
                    rows.append(dict(subset=subset, n=n, corrupt="key", layer=layer, site=site, position=pos,
                                     attrib=scale * (layer + 1) / 2, attrib_lo=0.0, attrib_hi=1.0))
    return pd.DataFrame(rows)


def test_importing_the_plotting_modules_leaves_the_backend_alone():
    code = ("import matplotlib; matplotlib.use('svg'); import mecheval.interventions.plots, mecheval.report.figures, "
            "mecheval.report.timelines, mecheval.interventions.runs; print(matplotlib.get_backend())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "svg"


def test_plots_draw_on_the_axes_given_and_name_the_subset(tmp_path):
    fig = Figure()
    left, right = fig.subplots(1, 2)
    assert heatmap(table(), "resid_pre", ax=left) is left
    assert left.get_title() == "resid_pre (outside, n = 40)"  # `outside` by default, said so
    assert heatmap(table(), "resid_pre", ax=right, subset="all").get_title() == "resid_pre (all, n = 64)"
    assert attrib_grid(table(), "resid_pre").to_numpy().max() == pytest.approx(0.5)  # outside's, not a mean
    ax = layer_profile(table(), tmp_path / "p.png", ax=Figure().subplots())
    assert "outside" in ax.get_title() and (tmp_path / "p.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="select one corrupt"):
        attrib_grid(pd.concat([table(), table().assign(corrupt="value")]), "resid_pre")


def test_integer_positions_are_ordered_as_numbers():
    df = pd.DataFrame({"layer": 0, "site": "resid_pre", "position": [10, 2, 0, 1], "attrib": [0.1, 0.2, 0.3, 0.4], "n": 8})
    assert list(attrib_grid(df, "resid_pre").columns) == [0, 1, 2, 10]


def test_a_model_with_nothing_to_attribute_still_draws(tmp_path):
    """A run that did not learn: every attribution NaN (no effect). The grid keeps every position, NaN."""
    df = table().assign(attrib=float("nan"))
    grid = attrib_grid(df, "resid_pre")
    assert list(grid.columns) == ["key", "value", "query"] and grid.isna().all().all()
    heatmap(df, "resid_pre", tmp_path / "h.png")
    assert (tmp_path / "h.png").stat().st_size > 1000


def _legible(fig: Figure) -> None:
    """Every text >= 9 pt (15 px at the 120 dpi figures are saved at) and no two tick labels of an axes overlapping."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    assert min(t.get_fontsize() for t in fig.findobj(Text) if t.get_text() and t.get_visible()) >= 9
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_heatmaps_stay_legible_with_long_position_names(tmp_path):
    """The positions `query` and `key&query` side by side once collided ("querykey&query")."""
    rows = table()
    longer = rows.assign(position=rows["position"].map({"key": "key&query", "value": "value&key+2", "query": "sep"}))
    ax = heatmap(pd.concat([rows, longer]), "resid_pre")
    _legible(ax.figure)
    window = pd.DataFrame([dict(direction=d, layer=l, site=s, offset=o, attrib=0.5) for d in ("key", "value")
                           for l in (0, 1) for s in ("conv_out", "resid_post") for o in (-1, 0, 1, 2, 3)])
    _legible(conv_window_heatmap(window))
