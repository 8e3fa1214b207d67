"""Accuracy against width: the table compared with the published values by intervals, the figure (ours
solid with error bars, the published values dashed in the same colour, one panel per group), and the
report and pages that show them where a study's best-learning-rate runs span several widths."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from matplotlib.figure import Figure

from mecheval.report.build import build_report
from mecheval.report.compare import final_test_accuracy
from mecheval.report.overview import with_interval
from mecheval.report.decide import compare_accuracy, difference_interval, multi_bootstrap, published_interval
from mecheval.report.figures import colours
from mecheval.report.published import AR_ACCURACY, MAMBA_AR_BY_CONV, WIDTHS
from mecheval.report.widths import DODGE, VARIANTS, ZOO, panel, readable_widths, spans_widths, width_figure, width_table

QUICK = Path(__file__).parents[2] / "results/cpu/quick"
NAN = float("nan")


@pytest.mark.parametrize("ours, lo, hi, theirs, expected", [
    (0.99, 0.98, 1.00, 0.99, "agree"),          # tightly around the published value: ours − published within ±0.05
    (0.985, 0.97, 0.995, 1.00, "agree"),        # outside the published interval, but the difference within the margin
    (0.50, 0.45, 0.55, 0.19, "differ"),         # disjoint from the published [0.15, 0.24]
    (0.85, 0.82, 0.88, 1.00, "differ"),         # both high no longer agree: 0.15 below, wholly beyond the margin
    (0.01, 0.00, 0.02, 0.10, "differ"),         # both low no longer agree: [-0.12, -0.06]
    (0.37, 0.00, 1.00, 0.50, "inconclusive"),   # bimodal seeds, [0.00, 1.00]: decides nothing
    (0.67, 0.00, 1.00, 1.00, "inconclusive"),
    (0.50, 0.49, 0.51, 0.50, "inconclusive"),   # the published value's own interval (n = 320) is wider than the margin
    (0.68, 0.62, 0.74, 0.77, "inconclusive"),   # [-0.16, -0.01]: partly within the margin, partly beyond
    (NAN, NAN, NAN, 0.50, "inconclusive"),      # no interval of ours
    (0.15, 0.10, 0.20, None, ""),               # nothing published
])
def test_comparison_is_decided_by_the_difference_interval_against_a_margin(ours, lo, hi, theirs, expected):
    assert compare_accuracy(ours, lo, hi, theirs) == expected


@pytest.mark.parametrize("ours, lo, hi, expected", [
    (0.00, 0.00, 0.004, "agree"),      # under the study's "≤ .06": as published, however far under
    (0.08, 0.06, 0.10, "agree"),       # above the bound by less than the margin
    (0.30, 0.27, 0.33, "differ"),      # wholly above bound + margin
    (0.10, 0.08, 0.13, "inconclusive"),  # reaching past bound + margin
])
def test_a_published_upper_bound_agrees_with_anything_below_it(ours, lo, hi, expected):
    assert compare_accuracy(ours, lo, hi, 0.06, bound=True) == expected
    assert compare_accuracy(0.00, 0.00, 0.004, 0.06) == "inconclusive"  # read as a value, 0.06 [0.04, 0.09] is not 0


def test_the_difference_interval_combines_ours_with_the_published_sampling_error():
    diff, d_lo, d_hi = difference_interval(0.68, 0.62, 0.74, 0.77)
    p_lo, p_hi = published_interval(0.77)
    assert diff == pytest.approx(-0.09)
    assert d_lo == pytest.approx(-0.09 - math.hypot(0.06, p_hi - 0.77)) and d_hi == pytest.approx(-0.09 + math.hypot(0.06, 0.77 - p_lo))
    assert d_lo < -0.09 - 0.06 and d_hi > -0.09 + 0.06  # wider than ours alone


def test_seeds_are_bootstrapped_jointly_with_their_examples():
    """Bimodal seeds (one fails, two learn): the multi-bootstrap spans [0, 1], where a t-interval over the seeds
    would be [-0.77, 2.1] clipped; seeds that agree give an interval about as wide as their examples allow."""
    assert multi_bootstrap([0.0, 1.0, 1.0], [0.0, 0.99, 0.99], [0.01, 1.0, 1.0], [512] * 3) == (0.0, 1.0)
    lo, hi = multi_bootstrap([0.95, 0.96, 0.97], [NAN] * 3, [NAN] * 3, [400] * 3)
    assert 0.93 < lo < 0.95 and 0.97 < hi < 0.99
    lo, hi = multi_bootstrap([0.8, 0.8], [0.7, 0.7], [0.9, 0.9])  # no counts: each seed's examples from its own interval
    assert 0.69 < lo < 0.75 and 0.85 < hi < 0.91


def test_published_interval_is_wilson_on_320_examples():
    lo, hi = published_interval(0.77)
    assert lo == pytest.approx(0.7195, abs=1e-3) and hi == pytest.approx(0.8116, abs=1e-3)


RUNS = [  # arch, name, conv, width, each seed's final test accuracy, test examples -> the comparison with the published value
    ("attention", "attention", None, 16, [0.08], 1024),              # .07: agree
    ("attention", "attention", None, 32, [0.99], 1024),              # 1.0: agree
    ("mamba", "mamba", None, 16, [0.20, 0.30, 0.40], 1024),          # .10: differ
    ("mamba", "mamba", None, 32, [0.62, 0.68, 0.74], 1024),          # .77: inconclusive
    ("mamba (d_conv 2)", "mamba", 2, 16, [0.05], 100),               # .04: inconclusive (within, but too wide)
    ("mamba (d_conv 2)", "mamba", 2, 32, [0.60], 100),               # .19: differ
]


def _hand_made() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary, study table) as `analyse.summarise` and `results.study_table` give them, by hand; the readouts'
    accuracy (`acc_outside`) set far from the test accuracy, which alone is compared with the published values."""
    summary = pd.DataFrame([{"arch": a, "model.d_model": w, "optim.lr": 1e-3, "seeds": len(accs), "acc": sum(accs) / len(accs),
                             "acc_outside": 0.5, "acc_outside_lo": 0.49, "acc_outside_hi": 0.51}
                            for a, _, _, w, accs, _ in RUNS])
    df = pd.DataFrame([{"arch": a, "arch_name": name, "arch_conv": c, "task.name": "ar", "model.d_model": w, "optim.lr": 1e-3,
                        "seed": seed, "acc": acc, "eval.size": n, "best_lr": True}
                       for a, name, c, w, accs, n in RUNS for seed, acc in enumerate(accs)])
    return summary, df


def test_table_beside_the_published_values_at_every_width():
    summary, df = _hand_made()
    assert spans_widths(summary) and not spans_widths(summary[summary["model.d_model"] == 16])
    table = width_table(summary, df)
    assert len(table) == 3 * len(WIDTHS)  # every published width, ours where we ran it
    ran = table[table["seeds"] > 0].set_index(["arch", "width"])
    assert ran["comparison"].to_dict() == {("attention", 16): "agree", ("attention", 32): "agree",
                                           ("mamba", 16): "differ", ("mamba", 32): "inconclusive",
                                           ("mamba (d_conv 2)", 16): "inconclusive", ("mamba (d_conv 2)", 32): "differ"}
    assert set(table.loc[table["arch"] == "mamba (d_conv 2)", "panel"]) == {"mamba: conv sizes"}
    assert set(table.loc[table["arch"] != "mamba (d_conv 2)", "panel"]) == {ZOO}
    assert panel("mamba (1 layer)", "mamba", None) == VARIANTS and panel("based (d_conv 4)", "based", 4) == "based: conv sizes"
    assert table.loc[table["arch"] == "mamba (d_conv 2)", "published"].tolist() == list(MAMBA_AR_BY_CONV[2].values())
    people = readable_widths(table)
    assert len(people) == len(RUNS)
    mamba = final_test_accuracy(df[(df["arch"] == "mamba") & (df["model.d_model"] == 32)])
    assert mamba[0] == pytest.approx(0.68) and mamba[1] < 0.66 and mamba[2] > 0.70  # over seeds and their examples
    assert people.iloc[3].to_dict() == {"architecture": "mamba", "width": 32, "seeds": 3, "ours [95% CI]": with_interval(*mamba),
                                        "published [95% CI, n = 320]": "0.77 [0.72, 0.81]", "comparison": "inconclusive"}


def test_figure_draws_ours_with_intervals_and_the_published_values_dashed():
    summary, df = _hand_made()
    palette = colours(list(dict.fromkeys(summary["arch"])))
    fig = width_figure(width_table(summary, df), palette)
    assert isinstance(fig, Figure)
    zoo, convs = fig.axes[:2]
    assert zoo.get_title() == ZOO and convs.get_title() == "mamba: conv sizes"
    assert zoo.get_xscale() == "log" and [t.get_text() for t in zoo.get_xticklabels()] == [str(w) for w in WIDTHS]
    dashed = {line.get_label(): line for line in zoo.lines if line.get_linestyle() == "--"}
    mamba = dashed["_published mamba"]
    assert list(mamba.get_xdata()) == list(WIDTHS) and list(mamba.get_ydata()) == list(AR_ACCURACY["mamba"].values())
    assert mamba.get_color() == palette["mamba"]
    ours = [line for line in zoo.lines if line.get_linestyle() == "-" and line.get_color() == palette["mamba"]]
    assert len(ours) == 1 and list(ours[0].get_ydata()) == [0.30, 0.68]
    assert list(ours[0].get_xdata()) == pytest.approx([16 * DODGE ** 0.5, 32 * DODGE ** 0.5])  # the second of two, beside
    assert len(zoo.collections) >= 2  # the error bars, one set per architecture
    assert "_published mamba (d_conv 2)" in [line.get_label() for line in convs.lines]
    legend = [t.get_text() for t in zoo.get_legend().get_texts()]
    assert legend == ["attention", "mamba", "ours (95% interval)", "published"]


def _copy(name: str, to: Path, width: int, acc: float | None = None) -> None:
    """A committed quick run copied to `to`, claimed to be of `width`; its final test accuracy (on 512 examples)
    set to `acc` where given."""
    shutil.copytree(QUICK / "runs" / name, to, ignore=shutil.ignore_patterns("checkpoints", "interventions", "*.png"))
    config = yaml.safe_load((to / "config.yaml").read_text())
    config["model"]["d_model"] = width
    (to / "config.yaml").write_text(yaml.safe_dump(config))
    if acc is not None:
        summary = json.loads((to / "summary.json").read_text())
        summary["final"]["test"]["acc"] = acc
        (to / "summary.json").write_text(json.dumps(summary))


def _final(accs: list[float]) -> str:
    """The compared accuracy of seeds whose final test accuracies on 512 examples are `accs`, as the tables show it."""
    return with_interval(*final_test_accuracy(pd.DataFrame({"acc": accs, "eval.size": 512})))


ATTENTION_32, MAMBA_32 = _final([0.5]), _final([0.75, 0.79])  # the fixture's d = 32 runs


@pytest.fixture
def two_widths(tmp_path) -> Path:
    """A folder of runs at d = 64 (as committed) and d = 32: attention (one seed), Mamba (two seeds)."""
    folder = tmp_path / "widths"
    _copy("preset-attention_lr-0.003_seed-0", folder / "attention-64", 64)
    _copy("preset-attention_lr-0.003_seed-0", folder / "attention-32", 32, acc=0.5)
    _copy("preset-mamba_lr-0.003_seed-0", folder / "mamba-64", 64)
    for seed, acc in ((0, 0.75), (1, 0.79)):
        _copy(f"preset-mamba_lr-0.003_seed-{seed}", folder / f"mamba-32-{seed}", 32, acc=acc)
    return folder


@pytest.mark.skipif(not QUICK.exists(), reason="the committed quick study is not in this checkout")
def test_report_shows_accuracy_against_width(two_widths):
    report = build_report(two_widths)
    assert (two_widths / "figures" / "accuracy_by_width.png").stat().st_size > 1000
    md = report.markdown.read_text()
    section = md.split("## Accuracy against width", 1)[1].split("\n## ", 1)[0]
    assert "![accuracy_by_width](figures/accuracy_by_width.png)" in md
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| ")]
    rows = {tuple(r[:2]): r[2:] for r in cells[1:]}  # (architecture, width) -> seeds, ours, published, comparison
    assert cells[0] == ["architecture", "width", "seeds", "ours [95% CI]", "published [95% CI, n = 320]", "comparison"]
    assert rows[("attention", "32")] == ["1", ATTENTION_32, "1.00 [0.99, 1.00]", "differ"]
    assert rows[("attention", "64")][-1] == "inconclusive"  # 0.95 against 1.00: the difference's interval spans -0.05
    # two seeds: the multi-bootstrap over seeds and examples (a t interval over the two gave [0.52, 1.00]); the
    # difference with the published 0.77 is near 0, but its interval reaches beyond ±0.05
    assert rows[("mamba", "32")] == ["2", MAMBA_32, "0.77 [0.72, 0.81]", "inconclusive"]
    assert rows[("mamba", "64")][-1] == "differ"  # ours above 0.93, published 0.81 [0.76, 0.85]
    assert "Accuracy against width" in report.html.read_text()


@pytest.mark.skipif(not QUICK.exists(), reason="the committed quick study is not in this checkout")
def test_pages_show_accuracy_against_width(tmp_path, two_widths):
    from pages import base, blocks, published_blocks, study_blocks

    root = tmp_path / "repo"
    (root / "results" / "cpu" / "widths").mkdir(parents=True)
    two_widths.rename(root / "results" / "cpu" / "widths" / "runs")
    shutil.copy(QUICK / "study.json", root / "results" / "cpu" / "widths" / "study.json")  # the study figure needs one
    (root / "docs").mkdir()
    page = root / "docs" / "page.md"
    page.write_text("# A page\n\n<!-- generated: widths task=ar -->\n<!-- end generated -->\n")
    base.runs_table.cache_clear()
    changed = blocks.write_pages(root)
    data, png = study_blocks.width_files(Path("results/cpu/widths"))
    assert data == Path("docs/figures/widths/cpu-widths.csv") and {data, png, Path("docs/page.md")} <= set(changed)
    assert (root / png).stat().st_size > 1000
    text = page.read_text()
    assert "![Accuracy against width, ours beside the published values](figures/widths/cpu-widths.png)" in text
    assert f"| mamba | 32 | 2 | {MAMBA_32} | 0.77 [0.72, 0.81] | inconclusive |" in text
    assert blocks.stale_pages(root) == []
    table = pd.read_csv(root / data)
    assert math.isclose(table.set_index(["arch", "width"]).at[("attention", 32), "acc"], 0.5)
    glance = pd.read_csv(root / published_blocks.FIGURE_DATA)  # the study figure: one line per architecture and width
    assert {"mamba (d = 32)", "mamba (d = 64)"} <= set(glance["arch"])


@pytest.mark.skipif(not QUICK.exists(), reason="the committed quick study is not in this checkout")
def test_a_widths_block_without_such_a_study_says_so(tmp_path):
    from pages import blocks, study_blocks

    (tmp_path / "results" / "cpu").mkdir(parents=True)
    (tmp_path / "results" / "cpu" / "quick").symlink_to(QUICK)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("<!-- generated: widths task=ar -->\n<!-- end generated -->\n")
    out = blocks.generate(tmp_path)
    assert "(no study here spans several widths yet)" in out[Path("docs/page.md")]
    assert not any(study_blocks.WIDTH_DIR in p.parents for p in out)  # no width figure for one width
