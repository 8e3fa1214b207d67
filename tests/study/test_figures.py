"""Report figures: the attribution scatter keeps every run inside its frame and marks unlearned runs."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.report.figures import ATTRIB_FRAME, boxes_figure, scatter_figure

attrib = st.floats(-5, 5, allow_nan=False)
run = st.tuples(st.sampled_from(["attention", "mamba", "h3"]), attrib, attrib, attrib,
                st.sampled_from(["induction", "direct retrieval", "mixed", "not learned"]))


def frame(runs) -> pd.DataFrame:
    return pd.DataFrame(runs, columns=["arch", "attrib@key", "attrib@value", "attrib@query", "verdict"])


@settings(max_examples=25, deadline=None)
@given(st.lists(run, min_size=1, max_size=12))
def test_scatter_draws_every_run_once_inside_the_frame_hollow_when_not_learned(runs):
    df = frame(runs)
    fig = scatter_figure(df)
    ax = fig.axes[0]
    points = [(tuple(xy), c.get_facecolors()) for c in ax.collections for xy in c.get_offsets()]
    assert len(points) == len(df)
    lo, hi = ATTRIB_FRAME
    assert all(lo <= v <= hi for xy, _ in points for v in xy)
    assert ax.get_xlim() == ATTRIB_FRAME and ax.get_ylim() == ATTRIB_FRAME
    hollow = sum(1 for c in ax.collections for _ in c.get_offsets() if len(c.get_facecolors()) == 0)
    assert hollow == (df["verdict"] == "not learned").sum()
    expected = sorted(zip(np.clip(df["attrib@query"], lo, hi), np.clip(df["attrib@value"], lo, hi)))
    np.testing.assert_allclose(sorted(xy for xy, _ in points), expected)
    # one legend entry per architecture, marked where none of its runs learned the task
    learned = df.groupby("arch")["verdict"].agg(lambda v: (v != "not learned").any())
    legend = sorted(t.get_text() for t in ax.get_legend().get_texts())
    assert legend == sorted(a if ok else f"{a} (not learned)" for a, ok in learned.items())
    plt.close(fig)


def test_boxes_leave_out_runs_that_did_not_learn():
    df = frame([("attention", 0.0, 1.0, 0.0, "induction"), ("h3", 3.0, -2.0, 0.1, "not learned"),
                ("mamba", 0.4, 0.0, 0.5, "direct retrieval")])
    fig = boxes_figure(df)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["attention", "mamba"]
    plt.close(fig)


def test_accuracy_bars_and_scatter_carry_their_intervals():
    from matplotlib.container import BarContainer, ErrorbarContainer

    from mecheval.report.figures import accuracy_figure

    best = pd.DataFrame({"arch": ["attention", "mamba"], "model.d_model": [64, 64], "acc": [0.9, 0.5],
                         "published_acc": [1.0, None], "acc_outside": [0.8, 0.4],
                         "acc_outside_lo": [0.7, 0.35], "acc_outside_hi": [0.85, 0.5]})
    ax = accuracy_figure(best).axes[0]
    [bars] = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [b.get_height() for b in bars] == [0.8, 0.4]  # accuracy outside the conv reach, not `acc`
    segments = bars.errorbar.lines[2][0].get_segments()
    np.testing.assert_allclose([(s[0][1], s[1][1]) for s in segments], [(0.7, 0.85), (0.35, 0.5)])
    df = frame([("attention", 0.0, 1.0, 0.0, "induction")]).assign(
        **{"attrib@value_lo": 0.9, "attrib@value_hi": 1.05, "attrib@query_lo": -0.02, "attrib@query_hi": 0.03,
           "attrib@key_lo": 0.0, "attrib@key_hi": 0.0})
    ax = scatter_figure(df).axes[0]
    [bars] = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    xs, ys = (seg.get_segments()[0] for seg in bars.lines[2])
    np.testing.assert_allclose([xs[0][0], xs[1][0], ys[0][1], ys[1][1]], [-0.02, 0.03, 0.9, 1.05])
    plt.close("all")


def test_boxes_only_where_an_architecture_has_three_runs_points_for_every_run():
    df = frame([("attention", 0.0, 1.0, 0.0, "induction")] * 3 + [("mamba", 0.4, 0.0, 0.5, "direct retrieval")] * 2)
    fig = boxes_figure(df)
    ax = fig.axes[1]
    boxes = [line for line in ax.lines if line.get_label().startswith("_") and len(line.get_xdata()) == 5]
    assert len(boxes) == 1  # attention's box; mamba's two runs stay points
    assert sum(len(c.get_offsets()) for c in ax.collections) == 5
    plt.close(fig)


def test_an_architecture_keeps_its_colour_in_every_figure_and_legends_sit_outside_the_axes():
    from matplotlib.colors import to_hex

    from mecheval.report.figures import accuracy_figure, colours

    palette = colours(["mamba (d_conv 0)", "attention", "mamba"])
    assert len(set(palette.values())) == 3
    best = pd.DataFrame({"arch": ["attention", "mamba"], "model.d_model": [64, 64], "acc": [0.9, 0.5],
                         "published_acc": [1.0, 0.8]})
    ax = accuracy_figure(best, palette).axes[0]
    assert [to_hex(b.get_facecolor()) for b in ax.patches] == [palette["attention"].lower(), palette["mamba"].lower()]
    ax2 = scatter_figure(frame([("mamba", 0.4, 0.0, 0.5, "direct retrieval")]), palette).axes[0]
    assert to_hex(ax2.collections[0].get_facecolors()[0]) == palette["mamba"].lower()
    for a in (ax, ax2):
        box = a.get_legend().get_bbox_to_anchor().transformed(a.transAxes.inverted())
        assert box.x0 >= 1.0  # anchored right of the axes, never on the bars or points
    plt.close("all")


def test_a_bar_for_every_architecture_even_where_no_example_lies_outside_the_conv_reach():
    from matplotlib.container import BarContainer

    from mecheval.report.figures import accuracy_figure

    best = pd.DataFrame({"arch": ["mamba", "h3"], "model.d_model": [64, 64], "acc": [0.9, 0.7],
                         "published_acc": [0.8, 0.02], "acc_outside": [0.8, float("nan")],
                         "acc_outside_lo": [0.7, float("nan")], "acc_outside_hi": [0.85, float("nan")],
                         "acc_all": [0.85, 0.6], "acc_all_lo": [0.8, 0.5], "acc_all_hi": [0.9, 0.7]})
    ax = accuracy_figure(best).axes[0]
    [bars] = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [b.get_height() for b in bars] == [0.8, 0.6]  # h3: every example is inside its whole-context conv
    assert "all intervention examples" in ax.get_ylabel()
    plt.close("all")


def test_boxes_figure_marks_the_published_medians():
    import pandas as pd

    from mecheval.report.compare import published_attribution
    from mecheval.report.figures import boxes_figure

    rows = pd.DataFrame({"arch": ["attention", "mamba"], "verdict": ["induction", "direct retrieval"],
                         "attrib@key": [0.0, 0.6], "attrib@value": [1.0, 0.0], "attrib@query": [0.0, 0.4]})
    published = {("mamba", "query"): published_attribution("atr", "easy", "mamba", "query")}
    assert published[("mamba", "query")] == 0.29 and published_attribution("ar", None, "mamba", "query") is None
    fig = boxes_figure(rows, published=published)
    ticks = [c for ax in fig.axes for c in ax.collections if c.get_label() == "published median"]
    assert len(ticks) == 1 and ticks[0].get_offsets().tolist() == [[1.0, 0.29]]
