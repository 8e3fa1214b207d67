"""Learning-rate sensitivity and coverage: every published-scale cell (task, grammar, architecture, width) at
every rate tried, and every published accuracy against them.

The study swept 5 or 7 rates per table (`published.swept_rates`: every ATR table stops at 3e-3) and kept the best;
ours is compared like for like, its best chosen among the rates the study swept for the cell's table (a rate
beyond them is shown, and not chosen). A cell whose best rate has neither a worse rate tried nor the end of that
grid on each side was never bracketed (its optimum may lie beyond what was tried). `rate_table` is the analysis (one row
per cell and rate: seeds, mean accuracy, verdicts, whether it is the cell's best and whether that best is
bracketed), `rate_figure` its picture, `bracket_table` the cells that do not agree with the study; `coverage_table` the published accuracy cells, each with what we ran
for it and the strict comparison (`decide.compare_accuracy`) at its best rate, `coverage_summary` their counts.
An ATR run trained with held-out pairs is a cell of its own (grammar `easy held-out`), read on the held-out pairs.
The published held-out accuracies are of the published generalisation language (`grammar_draw` `published-split`
or `published-split-sets`, tasks/atr/published.py), not of the easy grammar split: a held-out cell that has runs
on that language reads them alone, like for like; one without reads its runs on our easy grammar's split.
Any other ATR run trained on the published grammar itself (`task.params.grammar_draw` other than `mecheval`), or a model
built as the study's code builds it where its preset's runs are ours (`--build study` for attention: `model.build`
other than its preset's default, `study.presets.default_build`), is a check of the ATR-easy offset (docs/findings/atr.md), another design than our cells'
runs: it is not counted among them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from mecheval.interventions.verdict import LABELS  # noqa: E402
from mecheval.report import published  # noqa: E402
from mecheval.report.compare import TEST_N, published_accuracy, published_verdict, final_test_accuracy  # noqa: E402
from mecheval.report.decide import AGREE, DIFFER, compare_accuracy, compare_labels  # noqa: E402
from mecheval.report.overview import GRAMMAR  # noqa: E402
from mecheval.report.timelines import VERDICT_COLOURS  # noqa: E402
from mecheval.study.presets import default_build  # noqa: E402
from mecheval.tasks.atr.task import SPLIT_DRAWS  # noqa: E402
from mecheval.sweeps.table import DIVERGED, as_text, best_rates  # noqa: E402
from mecheval.training.config import ADDED_LATER  # noqa: E402

CELL = ["task.name", "grammar", "arch", "model.d_model"]  # one published cell
NO_VERDICT = "not read"
HELDOUT = " held-out"  # the grammar suffix of a generalisation run's cell (read on its held-out pairs)
HOLDOUT = "task.params.holdout_frac"
DRAW = "task.params.grammar_draw"  # ATR's grammar: ours from its seed (`mecheval`, the default), or the published one
BUILD = "model.build"  # the LM as we build it (`mecheval`, the default) or as the study's code does (`study`)
RATE_COLUMNS = ["task", "grammar", "arch", "width", "lr", "swept", "seeds", "acc", "acc_lo", "acc_hi", "verdict",
                "verdicts", "published", "best", "rates", "bracketed", "cpu_min", "wall_min", "finals", "studies"]
BEYOND_ALPHA = 0.35  # the figure's fill of a rate the study did not sweep for the cell's table
SEEDS_WANTED = 3  # a cell that still differs at its best rate: read on this many seeds there (issue 53, item 1)


def committed_runs(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """The finished and the diverged runs of several studies' `results.study_table(every_run=True)` as one table
    (a diverged run: no accuracy, verdict `diverged`), a run committed in two studies (same cell, rate, seed and
    final accuracy) counted once, runs on the published ATR grammar left out and a held-out cell read on the published
    generalisation language where it has runs there (module docstring); `grammar` is the ATR grammar ("" for AR)."""
    if not tables:
        return pd.DataFrame(columns=[*CELL, "optim.lr", "seed", "acc"])
    df = pd.concat(tables, ignore_index=True)
    draw = df[DRAW].fillna("mecheval") if DRAW in df else pd.Series("mecheval", index=df.index)
    df = df[df["status"].isin(["done", DIVERGED]) & draw.isin(["mecheval", *SPLIT_DRAWS]) & ~other_build(df)].copy()
    df.loc[df["status"] == DIVERGED, "verdict"] = DIVERGED  # a rate tried: no accuracy, worse than any that trained
    grammar = df[GRAMMAR].fillna("easy") if GRAMMAR in df else pd.Series("easy", index=df.index)
    held = df[HOLDOUT].fillna(0) > 0 if HOLDOUT in df else pd.Series(False, index=df.index)
    df["grammar"] = (grammar + np.where(held, HELDOUT, "")).where(df["task.name"] == "atr", "")
    if "acc_heldout" in df:  # a generalisation run is compared on its held-out pairs
        df["acc"] = df["acc_heldout"].where(held, df["acc"])
    on_language = draw[df.index].isin(SPLIT_DRAWS)  # the published generalisation language (held-out cells only)
    cell_has_it = on_language.groupby([df[c] for c in CELL], dropna=False).transform("any")
    df = df[on_language | ~cell_has_it]
    return df.drop_duplicates([*CELL, "optim.lr", "seed", "acc"], ignore_index=True)


def other_build(df: pd.DataFrame) -> pd.Series:
    """Rows whose model is built otherwise than its preset's paper-scale runs by default (`default_build`), where that
    default is ours: `--build study` where the cell's runs are of our build."""
    if BUILD not in df or "model.preset" not in df:  # no build set, or no preset (a plug-in): ours
        return pd.Series(False, index=df.index)
    default = df["model.preset"].map(lambda preset: default_build(preset, paper=True))
    build = df[BUILD].fillna(ADDED_LATER[BUILD])
    return (build != default) & (build != ADDED_LATER[BUILD])


def rate_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, rate) of `committed_runs`: `swept` (the study swept this rate for the cell's table,
    `published.swept_rates`), `seeds` (distinct seeds), `acc` (mean over its runs that did not
    diverge; NaN where every one did), `verdict` (the most common; `not read` where none was, `diverged`), `verdicts` (counts in words), `published` (the study's accuracy, NaN
    where none), `best` (among the swept rates, like for like with the published best, the one with the highest
    mean accuracy on the seeds every swept rate ran, as `sweeps.table.best_lr` chooses; among all where the cell
    tried none of them), `rates` (how many of the swept rates the cell tried),
    `bracketed` (on each side of the best rate a swept rate tried, or the end of the study's grid: within that
    grid nothing untried can beat it; a rate whose runs diverged is tried, and worse),
    `cpu_min`, `wall_min` (the median minutes of training a run at that rate, `run_minutes`), `finals` (each run's
    final test accuracy and its test examples, (acc, n), the runs that did not diverge), `studies` (the sorted
    studies its runs are of, where `runs` has a `study` column: `rates_data` sets it; else empty)."""
    rows = []
    eligible_rows = swept_where_tried(runs, CELL)
    for key, cell in runs.groupby(CELL, sort=True, dropna=False):
        task, grammar, arch, width = key
        name, conv = cell["arch_name"].iloc[0], cell["arch_conv"].iloc[0]
        theirs = published_value(task, grammar, name, None if conv != conv else conv, int(width), arch)
        grid = published.swept_rates(task, arch)
        by_rate = []
        for lr, at in cell.groupby("optim.lr", sort=True):
            verdicts = at["verdict"].fillna(NO_VERDICT)
            counts = verdicts.value_counts()
            _, lo, hi = final_test_accuracy(at)
            by_rate.append({"task": task, "grammar": grammar, "arch": arch, "width": int(width), "lr": float(lr),
                            "swept": published.swept(task, arch, float(lr)), "seeds": at["seed"].nunique(), "acc": float(at["acc"].mean()), "acc_lo": lo, "acc_hi": hi,
                            "verdict": counts.index[0],
                            "verdicts": ", ".join(f"{v} {k}" for v, k in counts.items()),
                            "published": np.nan if theirs is None else theirs,
                            "cpu_min": run_minutes(at, "cpu"), "wall_min": run_minutes(at, "wall"),
                            "finals": tuple((float(a), int(n)) for a, n in at[["acc", TEST_N]].dropna().itertuples(index=False)),
                            "studies": tuple(sorted(at["study"].unique())) if "study" in at else ()})
        eligible = cell[eligible_rows[cell.index]]
        [best_rate] = best_rates(eligible, pd.Series("", index=eligible.index), "acc")  # as `best_lr` chooses it
        tried = sorted(r["lr"] for r in by_rate if r["swept"])
        best = float(best_rate)
        bracketed = ((tried[0] < best or best <= grid[0] * 1.000001) and (tried[-1] > best or best >= grid[-1] * 0.999999)
                     if tried else False)
        for row in by_rate:
            row |= {"best": row["lr"] == best, "rates": len(tried), "bracketed": bracketed}
        rows += by_rate
    return pd.DataFrame(rows, columns=RATE_COLUMNS).astype({"best": bool, "bracketed": bool})


def swept_where_tried(df: pd.DataFrame, cell: list[str]) -> pd.Series:
    """[rows] the runs eligible as a cell's best rate, like for like with the published best: those at a rate the
    study swept for the cell's table (`published.swept_rates`), or every run of a cell (its `cell` columns) that
    tried none of them."""
    swept = pd.Series([published.swept(t, a, lr) for t, a, lr in zip(df["task.name"], df["arch"], df["optim.lr"])],
                      index=df.index, dtype=bool)
    return swept | ~swept.groupby([as_text(df[c]) for c in cell]).transform("any")


def run_minutes(runs: pd.DataFrame, clock: str) -> float:
    """The median minutes of training a run of `runs` by summary.json's `cpu_time_s` (`clock` "cpu": the training
    process's own CPU time, recorded since 2026-12-03) or `wall_time_s` ("wall": one thread's, beside whatever
    else shared the cores); NaN where no run recorded it (a diverged run records neither)."""
    column = f"summary.{clock}_time_s"
    seconds = pd.to_numeric(runs[column], errors="coerce") if column in runs else pd.Series(dtype=float)
    return float(seconds[seconds > 0].median() / 60)


def next_runs(cell: pd.DataFrame, accuracy: str) -> str:
    """What would settle a cell of `rate_table` (its rows, one per rate), by issue 53's rule: where its best rate is
    at the edge of the swept rates tried, the study's next rate beyond that edge (`published.swept_rates`), on each
    open side; where it is bracketed and the accuracy still differs, the seeds it lacks at the best rate; "–"
    where neither."""
    best = cell[cell["best"]].iloc[0]
    if not best["bracketed"]:
        grid = published.swept_rates(best["task"], best["arch"])
        tried = sorted(cell.loc[cell["swept"], "lr"]) or [best["lr"]]
        below = [f"lr {r:g}" for r in grid if r < tried[0] * 0.99][-1:] if best["lr"] == tried[0] else []
        above = [f"lr {r:g}" for r in grid if r > tried[-1] * 1.01][:1] if best["lr"] == tried[-1] else []
        return ", ".join(below + above)
    if accuracy == DIFFER and best["seeds"] < SEEDS_WANTED:
        return f"{SEEDS_WANTED - best['seeds']} more seeds at lr {best['lr']:g}"
    return "–"


def bracket_table(rates: pd.DataFrame, link: Callable[[Path], str] = str) -> pd.DataFrame:
    """The cells of `rate_table` whose best-rate accuracy does not agree with the published one by the strict
    rule (`decide.compare_accuracy`: differ or inconclusive), one row each: `cell`, `published`, `rates tried`
    (each rate's mean accuracy, ×n: its seeds where more than one; the best in bold; a rate the study did not sweep
    for the cell marked so), `bracketed`, `accuracy` (the comparison), `mechanism` (our
    most common verdict at the best rate against the published label, `decide.compare_labels`; blank where the
    study labels none or ours did not learn), `differs in` (the parts that differ: accuracy, mechanism), `next`
    (the runs that would settle it, `next_runs`), `min a run` (`_cell_minutes`: what the next run costs) and
    `studies` (the studies whose runs these are, by the rate, each as `link` writes it: the page links it to its
    section, which has the command that made it and resumes it)."""
    rows = []
    for (task, grammar, arch, width), cell in rates.groupby(["task", "grammar", "arch", "width"], sort=True):
        best = cell[cell["best"]].iloc[0]
        accuracy = compare_accuracy(best["acc"], best["acc_lo"], best["acc_hi"], best["published"],
                                    arch in published.UPPER_BOUNDS)
        if accuracy in ("", AGREE):
            continue
        theirs = published_verdict(task, arch)
        mechanism = compare_labels(best["verdict"], theirs)
        by_rate = cell.sort_values("lr")
        tried = ", ".join(f"**{_rate(r)}: {_acc_seeds(r)}**" if r["best"] else f"{_rate(r)}: {_acc_seeds(r)}"
                          for _, r in by_rate.iterrows())
        studies = dict.fromkeys(s for paths in by_rate["studies"] for s in paths)  # by rate, each once
        rows.append({"cell": f"{task.upper()}{' ' + grammar if grammar else ''} {arch} d={width}",
                     "published": f"{best['published']:.2f}", "rates tried": tried,
                     "bracketed": "yes" if best["bracketed"] else "no", "accuracy": accuracy,
                     "mechanism": f"{best['verdict']} ({theirs}): {mechanism}" if mechanism else "",
                     "differs in": ", ".join(part for part, outcome in (("accuracy", accuracy), ("mechanism", mechanism))
                                             if outcome == DIFFER) or "–",
                     "next": next_runs(cell, accuracy), "min a run": _cell_minutes(cell),
                     "studies": ", ".join(map(link, studies))})
    return pd.DataFrame(rows, columns=["cell", "published", "rates tried", "bracketed", "accuracy", "mechanism",
                                       "differs in", "next", "min a run", "studies"])


def _cell_minutes(cell: pd.DataFrame) -> str:
    """A cell's minutes of training a run (the median over its rates): CPU minutes where recorded, else wall
    minutes, marked so."""
    cpu, wall = cell["cpu_min"].median(), cell["wall_min"].median()
    return f"{cpu:.0f}" if cpu == cpu else f"{wall:.0f} wall" if wall == wall else "–"


def _rate(rate: pd.Series) -> str:
    """A `rate_table` row's learning rate in words, `(not swept)` where the study did not sweep it for the cell."""
    return f"{rate['lr']:g}" + ("" if rate["swept"] else " (not swept)")


def _acc(rate: pd.Series) -> str:
    """A `rate_table` row's mean accuracy in words: two decimals, or `diverged` where every run did."""
    return DIVERGED if rate["acc"] != rate["acc"] else f"{rate['acc']:.2f}"


def _acc_seeds(rate: pd.Series) -> str:
    """`_acc` with its seeds, ` ×n`, where more than one."""
    return _acc(rate) + (f" ×{rate['seeds']}" if rate["seeds"] > 1 else "")


def published_value(task: str, grammar: str, arch: str, conv, width: int, label: str) -> float | None:
    """The published accuracy of a cell (`compare.published_accuracy`; a held-out cell's: `published.ATR_HELDOUT`)."""
    if grammar.endswith(HELDOUT):
        return published.ATR_HELDOUT.get(label, {}).get(width)
    return published_accuracy(task, grammar or None, arch, conv, width, label)


def published_cells() -> pd.DataFrame:
    """Every published accuracy cell: task, grammar, arch (its label), width, published."""
    rows = [("ar", "", a, w, v) for a, t in published.AR_ACCURACY.items() for w, v in t.items()]
    rows += [("ar", "", f"mamba (d_conv {k})", w, v) for k, t in published.MAMBA_AR_BY_CONV.items() if k != 4
             for w, v in t.items()]
    rows += [("ar", "", f"based (d_conv {k})", w, v) for k, t in published.BASED_AR_BY_CONV.items() if k != 3
             for w, v in t.items()]
    rows += [("ar", "", a, w, v) for a, t in published.AR_VARIANT_ACCURACY.items() for w, v in t.items()]
    rows += [("atr", g, a, w, v) for g, archs in published.ATR_ACCURACY.items() for a, t in archs.items()
             for w, v in t.items()]
    rows += [("atr", "easy", a, w, v) for a, t in published.ATR_EASY_ONE_LAYER.items() for w, v in t.items()]
    rows += [("atr", "easy" + HELDOUT, a, w, v) for a, t in published.ATR_HELDOUT.items() for w, v in t.items()]
    return pd.DataFrame(rows, columns=["task", "grammar", "arch", "width", "published"])


def coverage_table(rates: pd.DataFrame) -> pd.DataFrame:
    """`published_cells` with, from `rate_table`: `rates` tried, `bracketed`, and at the best rate `lr`,
    `seeds`, `acc` with its interval and `comparison` (`decide.compare_accuracy`; "not run" where no run)."""
    best = rates[rates["best"]].set_index(["task", "grammar", "arch", "width"])
    rows = []
    for _, cell in published_cells().iterrows():
        key = (cell["task"], cell["grammar"], cell["arch"], cell["width"])
        row = cell.to_dict() | {"rates": 0, "bracketed": False, "lr": np.nan, "seeds": 0, "acc": np.nan,
                                "acc_lo": np.nan, "acc_hi": np.nan, "comparison": "not run"}
        if key in best.index:
            b = best.loc[key]
            row |= {k: b[k] for k in ("rates", "bracketed", "lr", "seeds", "acc", "acc_lo", "acc_hi")}
            row["comparison"] = compare_accuracy(b["acc"], b["acc_lo"], b["acc_hi"], cell["published"],
                                                 cell["arch"] in published.UPPER_BOUNDS)
        rows.append(row)
    return pd.DataFrame(rows)


def coverage_summary(coverage: pd.DataFrame) -> pd.DataFrame:
    """Counts per table (AR, ATR by grammar): published cells, compared, with ≥ 3 rates, bracketed, with ≥ 3
    seeds, and the comparisons (agree / differ / inconclusive)."""
    coverage = coverage.assign(table=coverage["task"].str.upper() + np.where(coverage["grammar"] != "", " " + coverage["grammar"], ""))
    rows = []
    for table, part in [*coverage.groupby("table", sort=True), ("all", coverage)]:
        ran = part[part["comparison"] != "not run"]
        rows.append({"table": table, "published cells": len(part), "compared": len(ran),
                     "≥ 3 rates": int((ran["rates"] >= 3).sum()), "best bracketed": int(ran["bracketed"].sum()),
                     "≥ 3 seeds": int((ran["seeds"] >= 3).sum()),
                     **{c: int((ran["comparison"] == c).sum()) for c in ("agree", "differ", "inconclusive")}})
    return pd.DataFrame(rows)


def _fill(verdict: str) -> dict:
    """A rate cell's fill: its verdict's colour; hatched grey where its runs diverged."""
    if verdict == DIVERGED:
        return {"fc": "white", "ec": "#999999", "hatch": "///", "lw": 0}
    return {"color": VERDICT_COLOURS.get(verdict, "white"), "ec": "white"}


def rate_figure(table: pd.DataFrame) -> plt.Figure:
    """`rate_table` drawn: a panel per task, a row per (architecture, grammar, width) with the published accuracy,
    a column per rate of the study's grid; each tried cell coloured by its most common verdict with the mean
    accuracy (×n: seeds) written in (`diverged`, hatched, where its runs diverged; faded where the study did not
    sweep that rate for the cell's table), the best swept rate outlined (dashed where it is not bracketed)."""
    tasks = list(table.groupby("task", sort=True))
    heights = [part.groupby(["arch", "grammar", "width"]).ngroups for _, part in tasks]
    fig, axes = plt.subplots(1, len(tasks), figsize=(7.2 * len(tasks), 1.6 + 0.24 * max(heights)), squeeze=False)
    rates = sorted(set(published.STUDY_LRS) | set(table["lr"]))
    for ax, (task, part) in zip(axes[0], tasks):
        cells = list(part.groupby(["arch", "grammar", "width"], sort=True))
        for y, ((arch, grammar, width), cell) in enumerate(cells):
            for _, r in cell.iterrows():
                x = rates.index(r["lr"])
                ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, **_fill(r["verdict"]), alpha=1 if r["swept"] else BEYOND_ALPHA))
                ax.text(x, y, _acc_seeds(r), ha="center", va="center", fontsize=7)
                if r["best"]:
                    ax.add_patch(Rectangle((x - 0.46, y - 0.42), 0.92, 0.84, fill=False, ec="black", lw=1.6,
                                           ls="-" if r["bracketed"] else "--"))
        labels = [f"{arch}{' ' + grammar if grammar else ''} d={width} "
                  f"({'–' if c['published'].iloc[0] != c['published'].iloc[0] else format(c['published'].iloc[0], '.2f')})"
                  for (arch, grammar, width), c in cells]
        ax.set(xlim=(-0.5, len(rates) - 0.5), ylim=(len(cells) - 0.5, -0.5), xticks=range(len(rates)),
               yticks=range(len(cells)), title=f"{task.upper()}: accuracy by learning rate")
        ax.set_xticklabels([f"{lr:g}" for lr in rates], fontsize=8)
        ax.set_yticklabels(labels, fontsize=7)
        ax.tick_params(length=0)
    shown = [v for v in (*LABELS, NO_VERDICT, DIVERGED) if v in set(table["verdict"])]
    handles = [Patch(**_fill(v), label=v) for v in shown]
    if not table["swept"].all():
        handles.append(Patch(color="grey", alpha=BEYOND_ALPHA, label="a rate the study did not sweep"))
    handles += [Patch(fill=False, ec="black", lw=1.6, label="best rate"),
                Patch(fill=False, ec="black", lw=1.6, ls="--", label="best rate, not bracketed")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.text(0.5, 0.995, "Rows: architecture, width (published accuracy); colour: most common verdict over seeds",
             ha="center", va="top", fontsize=9)
    fig.tight_layout(rect=(0, 0.03, 1, 0.985))
    return fig
