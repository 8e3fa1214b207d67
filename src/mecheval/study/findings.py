"""The published findings, each checked against a study's best-learning-rate runs.

A finding reads only the rows of the architectures it names; where those were not run it says so.
Thresholds: "high accuracy" >= HIGH_ACC; "near chance" <= NEAR_CHANCE × the task's chance accuracy
(a random context value); attributions as in `mecheval.interventions.verdict`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from mecheval.interventions.verdict import HIGH, LOW

HIGH_ACC = 0.8
NEAR_CHANCE = 2.0


@dataclass(frozen=True)
class Outcome:
    status: str  # "reproduced" | "not reproduced" | "not run"
    evidence: str


@dataclass(frozen=True)
class Finding:
    id: str
    claim: str
    check: Callable[[pd.DataFrame], Outcome]


def _rows(df: pd.DataFrame, arch: str) -> pd.DataFrame:
    return df[df["arch"] == arch]


def _describe(row: pd.Series) -> str:
    parts = [f"{row['arch']} d={row['model.d_model']}: acc {row['acc']:.2f}"]
    if isinstance(row.get("verdict"), str):
        parts.append(f"{row['verdict']} (@value {row['attrib@value']:.2f}, @query {row['attrib@query']:.2f}, @key {row['attrib@key']:.2f})")
    return ", ".join(parts)


def _each(archs: list[str], test: Callable[[pd.Series], bool]) -> Callable[[pd.DataFrame], Outcome]:
    """Reproduced where every run of the named architectures passes `test`."""

    def check(df: pd.DataFrame) -> Outcome:
        rows = df[df["arch"].isin(archs)]
        if rows.empty:
            return Outcome("not run", f"no runs of {', '.join(archs)}")
        ok = all(test(r) for _, r in rows.iterrows())
        return Outcome("reproduced" if ok else "not reproduced", "; ".join(_describe(r) for _, r in rows.iterrows()))

    return check


def _near_chance(row: pd.Series) -> bool:
    return row["acc"] <= max(NEAR_CHANCE * row["chance"], 0.05)


def _induction(row: pd.Series) -> bool:
    return row["acc"] >= HIGH_ACC and row.get("verdict") == "induction"


def _direct(row: pd.Series) -> bool:
    return row["acc"] >= HIGH_ACC and row.get("verdict") == "direct retrieval"


def _mamba_vs_attention(df: pd.DataFrame) -> Outcome:
    mamba, attention = _rows(df, "mamba"), _rows(df, "attention")
    if mamba.empty or attention.empty:
        return Outcome("not run", "needs runs of mamba and attention")
    m, a = mamba["acc"].max(), attention["acc"].max()
    return Outcome("reproduced" if m >= a - 0.01 else "not reproduced", f"mamba acc {m:.2f} vs attention {a:.2f}")


def _atr_storage(df: pd.DataFrame) -> Outcome:
    """attrib@value high (>= HIGH) for attention and Based, low (< LOW) for Mamba, H3 and Hyena."""
    high, low = ["attention", "based"], ["mamba", "h3", "hyena"]
    rows = df[df["arch"].isin(high + low)].dropna(subset=["attrib@value"])
    if rows.empty:
        return Outcome("not run", f"no intervened runs of {', '.join(high + low)}")
    ok = all(r["attrib@value"] >= HIGH if r["arch"] in high else r["attrib@value"] < LOW for _, r in rows.iterrows())
    evidence = "; ".join(f"{r['arch']} @value {r['attrib@value']:.2f}" for _, r in rows.iterrows())
    return Outcome("reproduced" if ok else "not reproduced", evidence)


FINDINGS: dict[str, Finding] = {
    f.id: f
    for f in [
        Finding("attention_induction", "Attention reaches high AR accuracy by induction (attrib@value ≈ 1).",
                _each(["attention"], _induction)),
        Finding("based_induction", "Based reaches high AR accuracy by induction (attrib@value ≈ 1).",
                _each(["based"], _induction)),
        Finding("mamba_direct", "Mamba (d_conv 4) reaches high AR accuracy by direct retrieval (attrib@value ≈ 0).",
                _each(["mamba"], _direct)),
        Finding("mamba_noconv_fails", "Mamba with d_conv 0 or 1 fails AR (accuracy near chance).",
                _each(["mamba (d_conv 0)", "mamba (d_conv 1)"], _near_chance)),
        Finding("based_long_fails", "Based with a long convolution in place of its short one fails AR.",
                _each(["based (d_conv long)"], _near_chance)),
        Finding("h3_hyena_poor", "H3 and Hyena do poorly on AR.",
                _each(["h3", "hyena"], lambda r: r["acc"] < HIGH_ACC / 2)),
        Finding("atr_mamba_vs_attention", "On ATR easy, Mamba is at least as accurate as attention.", _mamba_vs_attention),
        Finding("atr_storage", "On ATR, only attention and Based store the association at the value (attrib@value high); "
                "Mamba, H3 and Hyena do not.", _atr_storage),
        Finding("atr_mamba_noconv_induction", "Without its short convolution, Mamba learns induction on ATR (high attrib@value).",
                _each(["mamba (d_conv 0)"], lambda r: (r.get("attrib@value") or 0) >= 0.5)),
    ]
}
