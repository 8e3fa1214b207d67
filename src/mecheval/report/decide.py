"""Every threshold and decision rule the reports use, in one place: the thresholds, the three-valued
decision of an interval against a threshold, the outcome words, the comparison with a published accuracy
and the interval over seeds.

A quantity is compared with a threshold by its 95% interval, never by its point estimate: `above` is True
where the interval lies at or above the threshold, False where it lies wholly below, None (undecided) where
it straddles it or there is no interval; `all_of` is the three-valued and. A published finding and each of
its parts (accuracy, mechanism) read REPRODUCED, NOT_REPRODUCED or INCONCLUSIVE (`outcome`); an accuracy
beside the published one, or a mechanism beside the published one, reads AGREE, DIFFER or INCONCLUSIVE
(`compare_accuracy`, `compare_labels`). Over several seeds an interval is the multi-bootstrap's
(`multi_bootstrap`, Sellam et al. 2022), not a t-interval over a few seeds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from mecheval.intervals import above, all_of, negate
from mecheval.intervals import missing as _missing
from mecheval.interventions.metrics import accuracy_interval
from mecheval.interventions.verdict import FORMED, HIGH, LOW  # the verdict's: attribution high, low; a conv cell formed

__all__ = ["FORMED", "HIGH", "LOW", "HIGH_ACC", "POOR_ACC", "MARGIN", "MARGIN_CMP", "VALUE_HIGH", "PUBLISHED_N",
           "AGREE", "DIFFER", "INCONCLUSIVE", "REPRODUCED", "NOT_REPRODUCED", "NOT_RUN", "COMPARISONS", "RULE",
           "above", "below", "negate", "all_of", "outcome", "worst", "published_interval", "difference_interval",
           "compare_accuracy", "compare_labels", "multi_bootstrap", "seed_bootstrap"]

HIGH_ACC = 0.8  # "high accuracy", "learns"
POOR_ACC = HIGH_ACC / 2  # "fails" / "does poorly" where the study gives no number: below half of high accuracy
MARGIN = 0.02  # "at least as accurate": within two points of accuracy, by the paired interval (`report.paired`)
MARGIN_CMP = 0.05  # ours and the published accuracy agree where their difference lies within ±5 points
VALUE_HIGH = 0.5  # the published criterion of the ATR twist: most of the effect stored at the value
PUBLISHED_N = 320  # the study's test examples behind each published accuracy

AGREE, DIFFER, INCONCLUSIVE = "agree", "differ", "inconclusive"
REPRODUCED, NOT_REPRODUCED, NOT_RUN = "reproduced", "not reproduced", "not run"
COMPARISONS = (AGREE, DIFFER, INCONCLUSIVE)
OUTCOMES = (NOT_REPRODUCED, INCONCLUSIVE, REPRODUCED, NOT_RUN)  # worst first (`worst`)

RULE = (f"ours − published with its 95% interval (ours combined with the published value's Wilson interval on the "
        f"study's {PUBLISHED_N} test examples, Newcombe's method); agree where that interval lies within "
        f"±{MARGIN_CMP}, differ where it lies wholly outside, inconclusive otherwise or where ours has no interval")


def below(lo: float, hi: float, t: float) -> bool | None:
    """Is the quantity < t, by its interval (`above`, negated)?"""
    return negate(above(lo, hi, t))


def outcome(decisions: Iterable[bool | None]) -> str:
    """A finding (or one of its parts) over its runs: not reproduced where one run decidedly fails,
    inconclusive where none fails but one is undecided, else reproduced."""
    return {False: NOT_REPRODUCED, None: INCONCLUSIVE, True: REPRODUCED}[all_of(decisions)]


def worst(statuses: Iterable[str]) -> str:
    """The outcome of several outcomes (a finding from its parts, or its grammars): the worst of them, in the
    order not reproduced, inconclusive, reproduced, not run."""
    statuses = set(statuses)
    return next((s for s in OUTCOMES if s in statuses), NOT_RUN)


def published_interval(value: float, n: int = PUBLISHED_N) -> tuple[float, float]:
    """The 95% Wilson interval of a published accuracy, read as round(value * n) correct of the n test
    examples the study evaluates on."""
    return accuracy_interval(round(value * n), n)


def difference_interval(ours: float, lo: float, hi: float, theirs: float,
                        n: int = PUBLISHED_N) -> tuple[float, float, float]:
    """(ours − theirs, lo, hi): the difference with its 95% interval, our interval [lo, hi] combined with the
    published value's (`published_interval`) by Newcombe's method (the square-and-add of each side's
    distance to its limits; MOVER, Zou & Donner 2008), which takes any interval of ours: Wilson for one run,
    the multi-bootstrap's over seeds."""
    p_lo, p_hi = published_interval(theirs, n)
    diff = ours - theirs
    return (diff, diff - math.hypot(ours - lo, p_hi - theirs), diff + math.hypot(hi - ours, theirs - p_lo))


def compare_accuracy(ours: float, lo: float, hi: float, theirs: float | None, bound: bool = False) -> str:
    """Our accuracy `ours` (its 95% interval [lo, hi]) against a published one, by the difference's interval
    (`difference_interval`) against MARGIN_CMP: `agree` where it lies within ±MARGIN_CMP, `differ` where it lies
    wholly outside (beyond +MARGIN_CMP or below −MARGIN_CMP), else `inconclusive`, and where we have no
    interval. No threshold makes two accuracies agree (both high, both low). The published value's own
    interval (n = 320) is wider than the margin where it lies between about 0.3 and 0.7: there two
    accuracies can differ or be inconclusive, not agree. `bound`: the published value is an upper bound (the
    study's "≤ .06", `published.UPPER_BOUNDS`): ours agrees where its interval lies below the bound + MARGIN_CMP,
    differs where it lies wholly above it. Blank where the study publishes no value."""
    if _missing(theirs):
        return ""
    if _missing(ours, lo, hi):
        return INCONCLUSIVE
    if bound:
        return AGREE if hi - theirs <= MARGIN_CMP else DIFFER if lo - theirs > MARGIN_CMP else INCONCLUSIVE
    _, d_lo, d_hi = difference_interval(ours, lo, hi, theirs)
    if -MARGIN_CMP <= d_lo and d_hi <= MARGIN_CMP:
        return AGREE
    return DIFFER if d_lo > MARGIN_CMP or d_hi < -MARGIN_CMP else INCONCLUSIVE


def compare_labels(ours, theirs) -> str:
    """Our mechanism against the published one: agree / differ; inconclusive where ours is (its intervals
    decide no label); blank where either side has none or ours did not learn the task."""
    if not isinstance(theirs, str) or not isinstance(ours, str) or ours == "not learned":
        return ""
    if ours == INCONCLUSIVE:
        return INCONCLUSIVE
    return AGREE if ours == theirs else DIFFER


def seed_bootstrap(point: float, lo: float, hi: float, n: float | None, n_boot: int,
                   rng: np.random.Generator) -> np.ndarray:
    """One seed's `n_boot` resamples over its examples: an accuracy on `n` examples exactly (the resampled
    share of correct answers is binomial); another quantity (an attribution) from its own 95% interval, as a
    normal of that width (the examples' resamples are not kept); the point itself where it has no interval."""
    if not _missing(n) and n > 0:
        return rng.binomial(int(n), min(max(point, 0.0), 1.0), n_boot) / int(n)
    if _missing(lo, hi):
        return np.full(n_boot, point)
    return rng.normal(point, (hi - lo) / (2 * 1.959964), n_boot)


def multi_bootstrap(points: list[float], los: list[float], his: list[float], ns: list[float | None] | None = None,
                    n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """The multi-bootstrap interval of a mean over seeds (Sellam et al. 2022): each resample draws the seeds with
    replacement and, within each drawn seed, its examples (`seed_bootstrap`: independently per seed), and
    averages; the percentile interval of those means. Seeds that disagree (bimodal: 0, 1, 1) give an interval
    as wide as they are apart."""
    rng = np.random.default_rng(seed)
    ns = ns or [None] * len(points)
    within = np.stack([seed_bootstrap(p, lo, hi, n, n_boot, rng) for p, lo, hi, n in zip(points, los, his, ns)])
    drawn = rng.integers(0, len(points), size=(n_boot, len(points)))  # [n_boot, seeds]
    means = within[drawn, np.arange(n_boot)[:, None]].mean(axis=1)
    alpha = (1 - level) / 2
    q_lo, q_hi = np.quantile(means, [alpha, 1 - alpha])
    return float(q_lo), float(q_hi)


def _examples_of(col: str) -> str:
    """The column counting the examples behind an accuracy column: `acc_outside` -> `n_outside`,
    `heldout.acc_all` -> `heldout.n_all`."""
    split, _, name = col.rpartition(".")
    return (f"{split}." if split else "") + name.replace("acc_", "n_", 1)


def interval_over_seeds(group: pd.DataFrame, col: str) -> tuple[float, float]:
    """95% interval of `col` for one (architecture, width, lr): over seeds where there are several, the
    multi-bootstrap's (`decide.multi_bootstrap`: seeds and, within each, its examples resampled; an accuracy's
    examples from its count, an attribution's from its own interval), else the run's own (Wilson for
    accuracy, bootstrap for attributions)."""
    rows = group[group[col].notna()]
    lo, hi, n = (rows[c].astype(float).tolist() if c in rows else [float("nan")] * len(rows)
                 for c in (f"{col}_lo", f"{col}_hi", _examples_of(col)))
    accuracy = col.startswith(("acc", "heldout.acc"))
    if len(rows) >= 2:
        lo_, hi_ = multi_bootstrap(rows[col].astype(float).tolist(), lo, hi, n if accuracy else None)  # an accuracy's
        return (max(lo_, 0.0), min(hi_, 1.0)) if accuracy else (lo_, hi_)  # examples from their count where known
    return (lo[0], hi[0]) if len(rows) == 1 else (float("nan"), float("nan"))
