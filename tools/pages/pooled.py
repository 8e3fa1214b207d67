"""Several studies' runs read as one (`make pages`' `pooled` block): the study's own tables, across the
studies that ran its parts separately (seeds added later, one width per study, another rate).

`pooled_table` is the runs (every run directory under each study's runs/, whether its latest sweep.yaml names
it or not; a run committed in several studies counted once; the best learning rate chosen over all of them, among
the rates the study swept for the cell's table where the pool tried any);
`left_out` names the runs a table does not read, with the reason; `pooled_summary` its rows per architecture
(width, grammar) beside the published accuracy and attribution medians, compared by intervals; `attribution_runs` the per-run attributions
the box figure (`figures.boxes_figure`) draws, with the published medians, as one table that a CSV keeps.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mecheval.interventions.verdict import shows_attributions
from mecheval.report import published
from mecheval.report.analyse import summarise
from mecheval.report.compare import cell_runs, heldout_cells, published_attribution, published_words, final_test_accuracy
from mecheval.report.decide import compare_accuracy
from mecheval.report.figures import POSITIONS
from mecheval.report.overview import GRAMMAR, by_grammar, shown_accuracy, with_interval
from mecheval.report.results import HELDOUT_READ_ACC, HELDOUT_VALUE, study_table
from mecheval.sweeps.table import DIVERGED, SEED, as_text, best_lr, collect, config_columns
from pages.rates import swept_where_tried

STUDY = "study"  # the column naming the study a pooled run was read from


def pooled_table(study_dirs: list[Path]) -> pd.DataFrame:
    """`results.study_table` rows of every run of every study in `study_dirs` (in that order; those its sweep.yaml
    does not name too: `every_run`), with `study` (its path) added: a run whose config and summary another study
    already holds (the same run committed twice, e.g. read again beside other architectures; a run trained again
    differs in its timings) is kept once, from the first study; `best_lr` is chosen anew over all of them (`sweeps.table.best_lr`), so that seeds run in another study count toward the same selection.
    ValueError where best runs of one architecture, width and rate differ in another field (a train order):
    they are two designs, and `analyse.summarise` would average them as seeds."""
    if not study_dirs:
        raise ValueError("pooled_table: no studies given")
    raws = [collect(d, every_run=True) for d in study_dirs]
    tables = [study_table(d, every_run=True).assign(**{STUDY: str(d)}) for d in study_dirs]
    raw = pd.concat(raws, ignore_index=True)  # the config columns, row for row beside the tables
    df = pd.concat(tables, ignore_index=True)
    config = config_columns(raw)
    keep = ~as_text(raw.drop(columns="name")).duplicated()  # the same config and summary: one run, copied
    raw, df = raw[keep].reset_index(drop=True), df[keep].reset_index(drop=True)
    eligible = swept_where_tried(df, [c for c in ("arch", "model.d_model", GRAMMAR) if c in df])
    best = best_lr(raw[eligible].assign(name=df.loc[eligible, "run_dir"]))["name"]  # run dirs are unique, names not
    df["best_lr"] = df["run_dir"].isin(set(best))
    _one_design(raw[df["best_lr"]], df[df["best_lr"]], [c for c in config if c != SEED])
    return df


def _one_design(raw: pd.DataFrame, df: pd.DataFrame, config: list[str]) -> None:
    """ValueError where the best runs `summarise` would average together (one architecture, width, rate and
    grammar) differ in another config field, e.g. a train order: those are two designs, not seeds of one."""
    keys = [df["arch"], df["model.d_model"], df["optim.lr"], *([df[GRAMMAR]] if GRAMMAR in df else [])]
    for key, rows in raw.groupby([as_text(k) for k in keys], sort=False):
        differ = [c for c in config if as_text(rows[c]).nunique() > 1]
        if differ:
            studies = sorted(set(df.loc[rows.index, STUDY]))
            raise ValueError(f"{key[0]} (d = {key[1]}, lr {key[2]}): {', '.join(differ)} differ between the runs of "
                             f"{', '.join(studies)}; pool studies of one design")


def pooled_summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per architecture (width, grammar where they vary) of `pooled_table`'s best-learning-rate runs,
    for people: seeds, the accuracy the readouts read (unseen prompts, outside the conv reach) with its 95% interval
    (over seeds where several: `analyse.summarise`), the final test accuracy (`compare.final_test_accuracy`: every test
    prompt, as the published accuracies were read), the published accuracy with its 320-example interval and the
    test accuracy compared with it (`decide.compare_accuracy`), the verdicts counted over seeds, and @key / @value / @query (mean over
    seeds, interval; `–` where most seeds did not learn) beside the study's published median (ATR only); for a
    generalisation study, accuracy and @value on the held-out pairs beside the study's."""
    summary = summarise(df).sort_values("model.d_model", kind="stable")  # widths in order, whichever study came first
    grammars = summary[GRAMMAR] if GRAMMAR in summary else pd.Series(None, index=summary.index)
    tasks = df.drop_duplicates("arch").set_index("arch")["task.name"]
    rows = []
    for (_, r), grammar in zip(summary.iterrows(), grammars):
        acc, lo, hi, _ = shown_accuracy(r)
        test, test_lo, test_hi = final_test_accuracy(cell_runs(df, r))
        theirs = r["published_acc"]
        row = {"architecture": r["arch"]}
        if summary["model.d_model"].nunique() > 1:
            row["d"] = int(r["model.d_model"])
        if grammars.nunique() > 1:
            row["grammar"] = grammar
        row |= {"lr": f"{r['optim.lr']:g}", "seeds": r["seed_list"], "acc read [95% CI]": with_interval(acc, lo, hi),
                "test acc [95% CI]": with_interval(test, test_lo, test_hi),
                "published [95% CI, n = 320]": (f"≤ {theirs:.2f}" if r["arch"] in published.UPPER_BOUNDS
                                                else published_words(theirs)),
                "comparison": compare_accuracy(test, test_lo, test_hi, theirs, r["arch"] in published.UPPER_BOUNDS) or "–", "verdicts": r["verdicts"] or "–"}
        learned = shows_attributions(r["verdict"])  # the most common verdict over seeds
        for pos in POSITIONS:
            median = published_attribution(tasks[r["arch"]], grammar if grammar == grammar else None, r["arch"], pos)
            ours = with_interval(r[f"attrib@{pos}"], r[f"attrib@{pos}_lo"], r[f"attrib@{pos}_hi"]) if learned else "–"
            row[f"@{pos} (published median)"] = ours + ("" if median is None else f" ({median:.2f})")
        if HELDOUT_READ_ACC in summary:  # a generalisation study's readout on the held-out pairs
            held = with_interval(r[HELDOUT_READ_ACC], r[f"{HELDOUT_READ_ACC}_lo"], r[f"{HELDOUT_READ_ACC}_hi"])
            value = with_interval(r[HELDOUT_VALUE], r[f"{HELDOUT_VALUE}_lo"], r[f"{HELDOUT_VALUE}_hi"]) if learned else "–"
            row |= heldout_cells(held, r["published_heldout_acc"], r["heldout_agree"], value, r["published_heldout_value"])
        rows.append(row)
    return pd.DataFrame(rows)


def left_out(df: pd.DataFrame) -> list[str]:
    """The runs of a `pooled_table` (or a study's table) that its summary does not read in full, each
    `STUDY/runs/NAME: REASON`: not finished or diverged (no final accuracy), or, at the best learning rate, no verdict (its
    accuracy is read, its mechanism and attributions are not: it was not intervened on)."""
    where = df[STUDY] + "/runs/" + df["name"] if STUDY in df else df["name"]
    reasons = pd.Series("", index=df.index)
    reasons[df["best_lr"] & df["verdict"].isna()] = "no verdict (accuracy only)"
    step = df["diverged.step"] if "diverged.step" in df else pd.Series(None, index=df.index)
    for i in df.index[df["status"] != "done"]:
        reasons[i] = f"diverged at step {int(step[i])}" if df.at[i, "status"] == DIVERGED else "not finished"

    return [f"{w}: {r}" for w, r in zip(where, reasons) if r]


def attribution_runs(df: pd.DataFrame) -> pd.DataFrame:
    """The best-learning-rate runs of `pooled_table` that were intervened on, one row each: arch
    (`overview.by_grammar`), seed, lr, verdict, attrib@key / @value / @query, and `published@POS`, the
    study's median for the architecture (NaN where it states none): what `figures.boxes_figure` draws."""
    runs = df[df["best_lr"] & df["verdict"].notna()]
    grammar = runs[GRAMMAR] if GRAMMAR in runs else pd.Series(None, index=runs.index)
    out = runs[["arch", "seed", "optim.lr", "verdict", *(f"attrib@{p}" for p in POSITIONS)]].copy()
    for pos in POSITIONS:
        out[f"published@{pos}"] = [published_attribution(t, g if g == g else None, a, pos)
                                   for t, g, a in zip(runs["task.name"], grammar, runs["arch"])]
    out["arch"] = by_grammar(out["arch"], grammar)  # one box per architecture and grammar
    # numbers whatever their studies' columns held (a study whose runs all diverged has only None there)
    return out.astype({f"{k}@{p}": float for k in ("attrib", "published") for p in POSITIONS}).reset_index(drop=True)


def published_medians(runs: pd.DataFrame) -> dict[tuple[str, str], float]:
    """(arch, position) -> the published median, from `attribution_runs`' table (as `boxes_figure` takes them)."""
    return {(a, p): float(v) for p in POSITIONS
            for a, v in runs.drop_duplicates("arch").set_index("arch")[f"published@{p}"].items() if v == v}
