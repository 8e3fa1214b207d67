"""The published attribution metric and its bootstrap interval.

Sufficiency (corrupted run, clean activation patched in), the study's formula:
    attrib = (mean(p_patched) - mean(p_corrupt)) / (mean(p_clean) - mean(p_corrupt))
    1 = the clean activation at this cell alone restores the clean answer; 0 = no effect.
Necessity (clean run, corrupted activation patched in):
    attrib = (mean(p_clean) - mean(p_patched)) / (mean(p_clean) - mean(p_corrupt))
    1 = the corrupted activation at this cell alone destroys the answer; 0 = no effect.
The same formulas apply to the answer's logit (`logit_attrib`).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.stats import binomtest

DIRECTIONS = ("sufficiency", "necessity")


def attribution(m_patched, m_clean, m_corrupt, direction: str = "sufficiency"):
    """The attribution from means (floats or broadcastable arrays)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.subtract(m_clean, m_corrupt)
        num = np.subtract(m_patched, m_corrupt) if direction == "sufficiency" else np.subtract(m_clean, m_patched)
        return np.divide(num, gap)


def bootstrap_attribution(
    p_patched: np.ndarray,
    p_clean: np.ndarray,
    p_corrupt: np.ndarray,
    direction: str = "sufficiency",
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap over examples: p_patched [C, B], p_clean and p_corrupt [B] -> (lo, hi) [C].

    Each resample draws B examples with replacement (the same examples for every cell), as
    multinomial counts W [n_boot, B], so a resample's means are W @ x / B.
    """
    B = p_clean.shape[0]
    w = np.random.default_rng(seed).multinomial(B, np.full(B, 1.0 / B), size=n_boot) / B  # [n_boot, B]
    boot = attribution(p_patched @ w.T, w @ p_clean, w @ p_corrupt, direction)  # [C, n_boot]
    alpha = (1 - level) / 2
    # a run that did not learn has resamples whose gap is 0: 0/0 (nan, all-nan cells) or x/0 (±inf, inf − inf);
    # their interval is undefined (nan or inf, as the reports read it), without numpy's warnings
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanquantile(boot, [alpha, 1 - alpha], axis=1) if boot.size else (np.empty(0), np.empty(0))
    return lo, hi


def bootstrap_difference(a: np.ndarray, b: np.ndarray, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(a) − mean(b) over paired examples a, b [B] (the resamples of
    `bootstrap_attribution` with the same seed)."""
    B = a.shape[0]
    w = np.random.default_rng(seed).multinomial(B, np.full(B, 1.0 / B), size=n_boot) / B
    alpha = (1 - level) / 2
    lo, hi = np.quantile(w @ (a - b), [alpha, 1 - alpha])
    return float(lo), float(hi)


def accuracy_interval(correct: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (accuracy over n examples); (nan, nan) for n = 0."""
    if n == 0:
        return float("nan"), float("nan")
    ci = binomtest(int(correct), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def above_chance(correct: int, n: int, chance: float, alpha: float = 0.05) -> bool:
    """One-sided binomial test: is the accuracy significantly above `chance` (at level alpha)?"""
    return n > 0 and bool(binomtest(int(correct), int(n), chance, alternative="greater").pvalue < alpha)
