"""Fit to the training set: runs that answer their own training examples but not fresh ones.

At the paper scale a run reads one fixed set (100,032 examples) for 16 or 32 epochs, so a model can fit that
set without learning the task: accuracy on its training batches rises while the test set, fresh examples,
stays near chance. The trainer logs each `log_every`-th training batch's accuracy; the batches of the last
LAST_STEPS steps estimate the accuracy on the training set at the end of training.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pandas as pd

from mecheval.interventions.metrics import accuracy_interval
from mecheval.report.overview import with_interval
from mecheval.store import runs

LAST_STEPS = 1000
# a run "fits its training set only" where the lower end of its training-batch interval exceeds the
# upper end of its test accuracy's interval by more than this
MEMORISED_GAP = 0.25
Z95 = 1.96
FITS_ONLY = "fits its training set only"
FIT_NOTE = (f"Runs trained on a fixed set: accuracy on their training batches over the last {LAST_STEPS:,} steps "
            "(as logged; 95% interval over the batches) beside test accuracy on fresh examples (Wilson, per example). "
            f"`{FITS_ONLY}`: the training interval lies more than "
            f"{MEMORISED_GAP} above the test one, so the model answers the examples it was trained on without "
            "having learned the task.")


def training_accuracy(run_dir: str | Path, last: int = LAST_STEPS) -> tuple[float, float, float, int] | None:
    """Mean accuracy on the logged training batches of the run's `last` steps -> (mean, lo, hi, k): a normal
    95% interval over the k batches; None where nothing was logged."""
    records = runs.metrics(Path(run_dir))
    if not records:
        return None
    final = records[-1]["step"]
    accs = [r["acc"] for r in records if "acc" in r and r["step"] > final - last]
    if not accs:
        return None
    k, mean = len(accs), statistics.fmean(accs)
    half = Z95 * (statistics.stdev(accs) if k > 1 else 0.0) / math.sqrt(k)
    return mean, max(0.0, mean - half), min(1.0, mean + half), k


def fit_table(best: pd.DataFrame) -> pd.DataFrame:
    """Per best-lr run trained on a fixed set (`train_size`): training-batch accuracy over the last LAST_STEPS
    steps and test accuracy, each with its 95% interval, and the reading: `fits its training set only` where
    the training interval lies more than MEMORISED_GAP above the test one, else `–`. Empty without such runs."""
    rows = []
    for _, r in best.iterrows():
        if pd.isna(r.get("train_size")) or pd.isna(r.get("acc")):
            continue
        train = training_accuracy(r["run_dir"])
        if train is None:
            continue
        n_test = int(r["eval.size"])
        test_lo, test_hi = accuracy_interval(round(float(r["acc"]) * n_test), n_test)  # per example: conservative
        mean, lo, hi, k = train
        rows.append({
            "architecture": r["arch"], "d": int(r["model.d_model"]), "lr": f"{r['optim.lr']:g}", "seed": int(r["seed"]),
            "training batches [95% CI]": f"{with_interval(mean, lo, hi)} ({k} batches)",
            "test accuracy [95% CI]": f"{with_interval(float(r['acc']), test_lo, test_hi)} (n={n_test})",
            "reading": FITS_ONLY if lo - test_hi > MEMORISED_GAP else "–",
        })
    return pd.DataFrame(rows)


def any_fits_only(fit: pd.DataFrame) -> bool:
    """Whether a row of `fit_table` reads FITS_ONLY."""
    return not fit.empty and bool((fit["reading"] == FITS_ONLY).any())
