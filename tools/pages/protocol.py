"""The published reading, simulated from our runs: how likely the study's own protocol, run on models like ours,
reads its published accuracy.

A published accuracy is the maximum, over the rates the study swept for its table, of one run's final accuracy on
the first 320 test examples (docs/findings/atr.md, the offset's item 3). Ours is a mean over seeds on 1,024 examples
at one rate. `protocol_table` draws that reading from our runs: per rate we tried among the swept ones, a seed at
random, its accuracy drawn from its own uncertainty (Jeffreys: Beta(k + ½, n − k + ½) over its n test examples),
320 examples drawn at it; the reading is the maximum over the rates. It answers whether the published value is
what the published protocol would read on models like ours, selection over rates and a small test set included:
`p_at_least` is the share of draws at the published value or above, `p_at_most` at it or below: exactly, where the
value is a share of 320 (`published.of_320`), else as it rounds to two decimals (a value read off a plot). Where the published value is an upper bound (`published.UPPER_BOUNDS`: "≤ .06"),
any reading below it agrees (`p_at_least` is 1).

A held-out cell is left out: its published value was read at the rate that was best on the in-distribution split,
not as the maximum of itself.

Rates we did not try can only raise the maximum: where ours reads lower (`p_at_least` < 2.5%) and the best rate is
not bracketed, an untried rate may close the gap (`open`); where ours reads higher, untried rates cannot lower it.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
from scipy.stats import combine_pvalues

from mecheval.report import published
from mecheval.report.published import PUBLISHED_N
from pages.rates import HELDOUT

TAIL = 0.025  # a two-sided 5% test: the published value in either 2.5% tail of the simulated readings
ROUNDING = 0.005  # a published value read off a plot: the reading rounded to two decimals
CONSISTENT, LOWER, HIGHER, OPEN = "consistent", "ours lower", "ours higher", "open"


def simulated_readings(finals_by_rate: list[tuple[tuple[float, int], ...]], draws: int,
                       rng: np.random.Generator) -> np.ndarray:
    """[draws] the published protocol's reading: per rate (its runs' (accuracy, test examples)), a run at random,
    its accuracy drawn from Beta(k + ½, n − k + ½), `PUBLISHED_N` examples at it; the maximum over the rates."""
    best = np.zeros(draws)
    for finals in finals_by_rate:
        acc, n = (np.array(v, dtype=float) for v in zip(*finals))
        pick = rng.integers(len(finals), size=draws)
        k = np.round(acc * n)[pick]
        p = rng.beta(k + 0.5, n[pick] - k + 0.5)
        best = np.maximum(best, rng.binomial(PUBLISHED_N, p) / PUBLISHED_N)
    return best


def protocol_table(rates: pd.DataFrame, draws: int = 20_000, seed: int = 0) -> pd.DataFrame:
    """Per cell of `rates.rate_table` with a published value and a run at a swept rate: `rates` (those used, ×n:
    their runs where more than one),
    `median` and `lo`, `hi` (the simulated reading's 2.5–97.5% range), `published`, `p_at_least`, `p_at_most`
    and `outcome` (`consistent`, `ours lower`, `ours higher`, or `open` where ours reads lower and the best rate
    is not bracketed). Each cell draws from a generator of its own, seeded by `seed` and the cell's name: a cell's
    numbers do not move when another cell gains runs."""
    rows = []
    for (task, grammar, arch, width), cell in rates.groupby(["task", "grammar", "arch", "width"], sort=True):
        used = cell[cell["swept"] & cell["finals"].map(len).gt(0)]
        theirs = cell["published"].iloc[0]
        if used.empty or theirs != theirs or grammar.endswith(HELDOUT):
            continue
        rng = np.random.default_rng([seed, zlib.crc32(f"{task}|{grammar}|{arch}|{width}".encode())])
        reading = simulated_readings(list(used["finals"]), draws, rng)
        bound = arch in published.UPPER_BOUNDS  # "≤ value": any reading below it agrees
        slack = 1e-9 if abs(theirs * PUBLISHED_N - round(theirs * PUBLISHED_N)) < 1e-6 else ROUNDING  # exact, or read
        at_least = 1.0 if bound else float(np.mean(reading >= theirs - slack))
        at_most = float(np.mean(reading <= theirs + slack))
        bracketed = bool(cell.loc[cell["best"], "bracketed"].iloc[0])
        outcome = (HIGHER if at_most < TAIL else CONSISTENT if at_least >= TAIL else LOWER if bracketed else OPEN)
        lo, median, hi = np.quantile(reading, [TAIL, 0.5, 1 - TAIL])
        rows.append({"task": task, "grammar": grammar, "arch": arch, "width": int(width), "bracketed": bracketed, "bound": bound,
                     "rates": ", ".join(f"{r.lr:g}" + (f" ×{len(r.finals)}" if len(r.finals) > 1 else "")
                                        for r in used.itertuples()),
                     "median": float(median), "lo": float(lo), "hi": float(hi), "published": float(theirs),
                     "p_at_least": at_least, "p_at_most": at_most, "outcome": outcome})
    return pd.DataFrame(rows, columns=["task", "grammar", "arch", "width", "bracketed", "bound", "rates", "median", "lo", "hi",
                                       "published", "p_at_least", "p_at_most", "outcome"])


def joint_lower(table: pd.DataFrame) -> tuple[int, float]:
    """(cells, p): Fisher's combination of `p_at_least` over the cells of `protocol_table` (not upper bounds) whose
    best rate is bracketed (an untried rate could raise an unbracketed cell's reading, so its share is only a lower bound) and
    that do not read higher: whether, taken together, ours read lower than the published protocol would. (0, NaN)
    where no cell qualifies."""
    shares = table.loc[table["bracketed"] & ~table["bound"] & (table["outcome"] != HIGHER), "p_at_least"]
    if shares.empty:
        return 0, float("nan")
    return len(shares), float(combine_pvalues(shares.clip(lower=1 / 1e6), method="fisher").pvalue)
