"""Two runs' accuracies compared like for like: on the same examples, with a paired interval.

Every intervened run keeps its per-example readout (`examples.parquet`, `interventions.accuracy.example_table`):
an id per example, whether the answer was right, and the subsets of the artefact control. Two runs read on the
same examples (the same task, split, seed and n) are compared on
    all           every example
    outside both  the examples outside the conv reach of *both* models (each model's artefact control applied
                  to both), so that neither side is read on examples the other one skips
with the 95% percentile bootstrap interval of the paired difference in accuracy (`bootstrap_difference`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from mecheval.common import ConfigError
from mecheval.interventions.accuracy import EXAMPLES
from mecheval.interventions.metrics import bootstrap_difference
from mecheval.report.decide import above
from mecheval.store import runs

COLUMNS = ["subset", "n", "acc_a", "acc_b", "diff", "diff_lo", "diff_hi"]


def read_examples(run_dir: str | Path) -> pd.DataFrame | None:
    """The run's per-example table, or None where it was not written (runs intervened before it existed)."""
    path = Path(run_dir) / EXAMPLES
    return runs.table(path, ("id", "correct", "outside")) if path.exists() else None


def paired_accuracy(a: pd.DataFrame, b: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Accuracy of run a and run b on the same examples, and a − b with its 95% interval: one row per
    subset (`all`, `outside both`; module docstring). ValueError where the two tables hold other examples."""
    if len(a) != len(b) or not np.array_equal(a["id"].to_numpy(), b["id"].to_numpy()):
        raise ValueError("the two runs were read on different examples (task, split, seed or n differ)")
    subsets = {"all": np.ones(len(a), dtype=bool), "outside both": a["outside"].to_numpy() & b["outside"].to_numpy()}
    rows = []
    for name, mask in subsets.items():
        x, y = a["correct"].to_numpy()[mask].astype(float), b["correct"].to_numpy()[mask].astype(float)
        lo, hi = bootstrap_difference(x, y, n_boot, seed=seed) if mask.any() else (float("nan"), float("nan"))
        mean = lambda v: float(v.mean()) if len(v) else float("nan")  # noqa: E731
        rows.append({"subset": name, "n": int(mask.sum()), "acc_a": mean(x), "acc_b": mean(y),
                     "diff": mean(x) - mean(y), "diff_lo": lo, "diff_hi": hi})
    return pd.DataFrame(rows, columns=COLUMNS)


def paired_runs(run_a: str | Path, run_b: str | Path) -> pd.DataFrame | None:
    """`paired_accuracy` of two runs' per-example tables; None where either has none. ConfigError naming both
    runs, how many examples each read and how to read them alike where they were read on other examples."""
    a, b = read_examples(run_a), read_examples(run_b)
    if a is None or b is None:
        return None
    try:
        return paired_accuracy(a, b)
    except ValueError:
        raise ConfigError(f"{run_a} ({len(a)} examples) and {run_b} ({len(b)} examples) were read on different examples "
                         "(task, split, seed or --n differ); read them with one --n: `mecheval study … --n N` re-reads "
                         "a study's runs, `mecheval intervene RUN --n N --replace` one run") from None


def at_least_as_accurate(row: pd.Series, margin: float) -> bool | None:
    """a at least as accurate as b within `margin` (non-inferiority), decided by the paired interval: True
    where a − b's interval lies at or above −margin, False where it lies below, None where it straddles."""
    return above(row["diff_lo"], row["diff_hi"], -margin)
