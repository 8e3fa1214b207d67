"""Our results beside the published ones: the accuracy and the verdict the study reports per run, and our accuracy
on the population the published accuracies were read on (`final_test_accuracy`)."""

from __future__ import annotations

import pandas as pd

from mecheval.interventions.metrics import accuracy_interval
from mecheval.report import published
from mecheval.report.decide import interval_over_seeds, published_interval
from mecheval.report.overview import GRAMMAR, with_interval

TEST_N = "eval.size"  # the test examples behind a run's final test accuracy `acc`


def cell_runs(runs: pd.DataFrame, row: pd.Series) -> pd.DataFrame:
    """The best-learning-rate runs of a study table (`results.study_table`) behind one row of `analyse.summarise`:
    its architecture, width, learning rate and (where the table has one) grammar."""
    keep = runs["best_lr"] & (runs["arch"] == row["arch"]) & (runs["model.d_model"] == row["model.d_model"]) \
        & (runs["optim.lr"] == row["optim.lr"])
    if GRAMMAR in runs and isinstance(row.get(GRAMMAR), str):
        keep &= runs[GRAMMAR] == row[GRAMMAR]
    return runs[keep]


def final_test_accuracy(runs: pd.DataFrame) -> tuple[float, float, float]:
    """(mean, lo, hi): the final test accuracy (`acc`, over `eval.size` examples each) of one cell's runs, one per
    seed, with its 95% interval (a run's Wilson interval; over seeds the multi-bootstrap). It is what a published
    accuracy compares with: read like it on every test prompt, seen in training or not, and every example (the
    readouts' accuracies leave out seen prompts and examples inside the conv reach: on ATR easy, whose test
    prompts are a third seen, they read lower). NaNs where no run has a test accuracy."""
    runs = runs[runs["acc"].notna()]
    if runs.empty:
        return float("nan"), float("nan"), float("nan")
    accs, ns = runs["acc"].astype(float).tolist(), runs[TEST_N].astype(int).tolist()
    lo, hi = zip(*(accuracy_interval(round(a * n), n) for a, n in zip(accs, ns)))
    frame = pd.DataFrame({"acc_test": accs, "acc_test_lo": lo, "acc_test_hi": hi, "n_test": ns})
    return sum(accs) / len(accs), *interval_over_seeds(frame, "acc_test")


def published_accuracy(task: str, grammar: str | None, arch: str, conv: int | str | None, width: int,
                       label: str | None = None) -> float | None:
    """The published accuracy of architecture `arch` (a preset name) with convolution `conv` (None: its
    published default) at `width` on the task, or None where the study reports none. `label`: the run's
    `arch_label`, by which other depths and position embeddings are found (`published.AR_VARIANT_ACCURACY`)."""
    if label is not None and label != arch and conv is None:  # a depth or position variant
        variants = published.AR_VARIANT_ACCURACY if task == "ar" else (
            published.ATR_EASY_ONE_LAYER if task == "atr" and grammar in (None, "easy") else {})
        return variants.get(label, {}).get(width)
    if task == "ar":
        table = (
            published.AR_ACCURACY.get(arch) if conv is None
            else published.MAMBA_AR_BY_CONV.get(conv) if arch == "mamba"
            else published.BASED_AR_BY_CONV.get(conv) if arch == "based"
            else None
        )
        return None if table is None else table.get(width)
    if task == "atr" and conv is None:
        return published.ATR_ACCURACY.get(grammar or "easy", {}).get(arch, {}).get(width)
    return None


def published_verdict(task: str, label: str) -> str | None:
    """The mechanism the study reports for the architecture labelled `label` (`models.presets.arch_label`)
    on the task (None where it reports none)."""
    if task == "ar":
        return published.AR_VERDICT.get(label)
    if task == "atr":
        return published.ATR_VERDICT.get(label)
    return None


def published_attribution(task: str, grammar: str | None, arch: str, position: str) -> float | None:
    """The study's median attrib@`position` (key / value / query) of the architecture labelled `arch` on ATR
    `grammar` (default easy); None where it states none (it gives ATR medians only)."""
    if task != "atr":
        return None
    return published.ATR_ATTRIB_MEDIANS.get(position, {}).get(arch, {}).get(grammar or "easy")


def published_heldout(label: str, width: int) -> tuple[float | None, float | None]:
    """The study's ATR generalisation figures for the architecture labelled `label` at `width`: (accuracy on
    the held-out pairs, attrib@value on them); None where it states none."""
    return published.ATR_HELDOUT.get(label, {}).get(width), published.ATR_HELDOUT_VALUE.get(label)


def published_words(value: float | None) -> str:
    """A published accuracy with its `published_interval`, e.g. `0.96 [0.93, 0.98]`; `–` where none (None, NaN)."""
    return "–" if value is None or value != value else with_interval(value, *published_interval(value))


HELDOUT_ACC_CELL, HELDOUT_VALUE_CELL = "held-out acc (published, compared)", "held-out @value (published)"


def heldout_cells(acc: str, published_acc: float | None, compared: str, value: str,
                  published_value: float | None) -> dict[str, str]:
    """A generalisation run's two held-out cells for people: our accuracy on the held-out pairs (`acc`, text,
    with its interval where read) beside the published one and `compared` (`compare_accuracy`), and our
    held-out @value (text) beside the study's figure (`published_heldout`)."""
    pub_value = "" if published_value is None or published_value != published_value else f" ({published_value:.2f})"
    return {HELDOUT_ACC_CELL: f"{acc} ({published_words(published_acc)}, {compared or '–'})",
            HELDOUT_VALUE_CELL: value + pub_value}
