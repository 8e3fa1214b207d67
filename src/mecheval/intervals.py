"""The three-valued decision of a 95% interval against a threshold, which every verdict, finding and comparison
uses: True where the interval lies on the claimed side, False where it lies wholly on the other, None
(undecided) where it straddles the threshold or there is no interval. Thresholds live with their rules
(`interventions.verdict` for mechanisms, `report.decide` for findings and comparisons)."""

from __future__ import annotations

from collections.abc import Iterable


def missing(*values) -> bool:
    """Is any value absent (None or NaN)?"""
    return any(v is None or v != v for v in values)


def above(lo: float, hi: float, t: float, strict: bool = False) -> bool | None:
    """Is the quantity >= t (> t where `strict`), by its interval [lo, hi]?"""
    if missing(lo, hi):
        return None
    if (lo > t) if strict else (lo >= t):
        return True
    return False if ((hi <= t) if strict else (hi < t)) else None


def at_most(lo: float, hi: float, t: float) -> bool | None:
    """Is the quantity <= t, by its interval?"""
    if missing(lo, hi):
        return None
    return True if hi <= t else False if lo > t else None


def negate(decision: bool | None) -> bool | None:
    return None if decision is None else not decision


def all_of(decisions: Iterable[bool | None]) -> bool | None:
    """Three-valued and: False where any is False, else None where any is None, else True."""
    decisions = list(decisions)
    return False if False in decisions else None if None in decisions else True
