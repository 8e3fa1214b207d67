"""The published findings, each checked against a study's best-learning-rate runs.

A finding reads only the rows of the architectures it names (every seed); where those were not run it
says so. Accuracy is read on the examples outside the conv reach (`acc_outside`, the artefact control)
where the run was intervened on, else the final test accuracy. "High accuracy" is >= HIGH_ACC; "near
chance" means not significantly above the task's chance accuracy (one-sided binomial test, 5%), so a
model at 0.45 on 4 pairs (chance 0.25) is not near chance. Attributions as in
`mecheval.interventions.verdict`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mecheval.interventions.conv_window import best_cell
from mecheval.interventions.metrics import above_chance
from mecheval.interventions.verdict import FORMED, HIGH, LOW
from mecheval.models.presets import arch_label
from mecheval.report.overview import GRAMMAR, with_interval
from mecheval.report.paired import EXAMPLES, at_least_as_accurate, paired_accuracy, read_examples
from mecheval.report.results import HELDOUT_VALUE

# the architectures of the study's depth runs (its appendix figure): the zoo before DeltaNet joined it
DEPTH_ZOO = ("attention", "mamba", "based", "h3", "hyena", "baseconv")

HIGH_ACC = 0.8
POOR_ACC = HIGH_ACC / 2  # "fails" / "does poorly" where the study gives no number: below half of high accuracy
MARGIN = 0.02  # "at least as accurate": within two points of accuracy, by the paired interval (`report.paired`)
VALUE_HIGH = 0.5  # "high attrib@value" in the ATR no-conv claim: most of the effect stored at the value
EVAL_N = "eval.size"  # the test examples behind `acc` where a run has no intervention accuracy


@dataclass(frozen=True)
class Outcome:
    status: str  # "reproduced" | "not reproduced" | "inconclusive" (an interval spans the threshold, or an architecture the claim names has not run) | "not run"
    evidence: str


@dataclass(frozen=True)
class Finding:
    id: str
    claim: str
    test: Callable[[pd.DataFrame], Outcome]
    archs: tuple[str, ...] = ()  # the architectures it is about (labels, `arch`)
    needs_all: bool = False  # a comparison: it applies only where every one of `archs` ran
    grammar: str | None = None  # an ATR claim about one grammar reads only that grammar's runs
    where_learned: bool = False  # a claim of high accuracy: it reads the runs where the study's own is high

    def check(self, df: pd.DataFrame) -> Outcome:
        """The outcome on the best-learning-rate runs `df` (those of `grammar` where the claim names one; where
        the claim is one of high accuracy, those at widths where the published accuracy is high too)."""
        if self.grammar and GRAMMAR in df:
            df = df[df[GRAMMAR].isna() | (df[GRAMMAR] == self.grammar)]  # no grammar: the task's default, easy
        if not self.where_learned:
            return self.test(df)
        high = df.apply(_published_high, axis=1).astype(bool) if len(df) else pd.Series(dtype=bool)
        left = sorted({f"{r['arch']} at d = {int(r['model.d_model'])}" for _, r in df[~high].iterrows()
                       if r["arch"] in self.archs})
        outcome = self.test(df[high])
        if not left:
            return outcome
        note = f"left out, the published accuracy there being below {HIGH_ACC:g}: {', '.join(left)}"
        return Outcome(outcome.status, f"{outcome.evidence}; {note}" if outcome.status != "not run" else note)

    def applies(self, ran: list[str]) -> bool:
        """Does the finding concern the architectures that ran (any of its own; all, for a comparison)?"""
        hits = [a in ran for a in self.archs]
        return all(hits) if self.needs_all else any(hits)


def _published_high(row: pd.Series) -> bool:
    """Is the published accuracy of the run's architecture at its width high (>= HIGH_ACC)? True where the
    study publishes none, or the row does not say its task and width."""
    from mecheval.report.compare import published_accuracy  # compare reads this module's thresholds

    if not {"task.name", "model.d_model", "arch_name"} <= set(row.index):
        return True
    grammar, conv = row.get(GRAMMAR), row.get("arch_conv")
    published = published_accuracy(row["task.name"], grammar if isinstance(grammar, str) else None, row["arch_name"],
                                    None if conv is None or conv != conv else conv, int(row["model.d_model"]), row["arch"])
    return published is None or published >= HIGH_ACC


def _rows(df: pd.DataFrame, arch: str) -> pd.DataFrame:
    return df[df["arch"] == arch]


def _accuracy(row: pd.Series) -> tuple[float, int]:
    """(accuracy, examples): outside the conv reach where intervened on, else the final test accuracy."""
    for acc, n in (("acc_outside", "n_outside"), ("acc_all", "n_all")):
        if row.get(acc) is not None and row.get(acc) == row.get(acc):
            return float(row[acc]), int(row[n])
    return float(row["acc"]), int(row.get(EVAL_N) or 0)


def _on(row: pd.Series) -> str:
    """` on GRAMMAR` for an ATR run whose config names its grammar; empty otherwise."""
    grammar = row.get(GRAMMAR)
    return f" on {grammar}" if isinstance(grammar, str) else ""


def _describe(row: pd.Series) -> str:
    acc, n = _accuracy(row)
    seed = f" seed {row['seed']}" if "seed" in row else ""
    parts = [f"{row['arch']} d={row['model.d_model']}{seed}{_on(row)}: acc {acc:.2f} (n={n})"]
    if row.get("verdict") == "not learned":  # attributions of a model that did not learn are noise
        parts.append("not learned")
    elif isinstance(row.get("verdict"), str):
        parts.append(f"{row['verdict']} (@value {row['attrib@value']:.2f}, @query {row['attrib@query']:.2f}, @key {row['attrib@key']:.2f})")
    return ", ".join(parts)


def _each(archs: list[str], test: Callable[[pd.Series], bool | None],
          describe: Callable[[pd.Series], str] = _describe) -> Callable[[pd.DataFrame], Outcome]:
    """Reproduced where every named architecture ran and each of its runs passes `test`; not reproduced
    where one run decidedly fails; inconclusive where none fails but one is undecided (`test` gives None: an
    interval straddles a threshold) or a named architecture did not run (the claim is about all of them).
    The evidence counts the runs of each kind, `describe`s each, and names the architectures that did not run."""

    def check(df: pd.DataFrame) -> Outcome:
        rows = df[df["arch"].isin(archs)]
        if rows.empty:
            return Outcome("not run", f"no runs of {', '.join(archs)}")
        results = [test(r) for _, r in rows.iterrows()]
        missing = [a for a in archs if a not in set(rows["arch"])]
        evidence = _tally(results) + "; ".join(describe(r) for _, r in rows.iterrows())
        if missing:
            evidence += f"; not run: {', '.join(missing)}"
        undecided = [None] if missing else []  # an architecture the claim names that did not run decides nothing
        return Outcome(_status(results + undecided), evidence)

    return check


def _status(results: list[bool | None]) -> str:
    """Not reproduced where one run decidedly fails, inconclusive where none fails but one is undecided."""
    return "not reproduced" if False in results else "inconclusive" if None in results else "reproduced"


def _tally(results: list[bool | None]) -> str:
    return f"{results.count(True)} of {len(results)} runs pass, {results.count(None)} undecided: "


def _ci_vs(row: pd.Series, col: str, t: float, above: bool) -> bool | None:
    """`col` >= t (above) or < t (not above), decided by its 95% interval (`col`_lo, `col`_hi); None where
    the interval straddles t or the run has no such reading."""
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    if lo is None or hi is None or lo != lo or hi != hi:
        return None
    decided = True if lo >= t else False if hi < t else None
    return decided if above or decided is None else not decided


def each(id: str, claim: str, archs: list[str], test: Callable[[pd.Series], bool | None],
         describe: Callable[[pd.Series], str] = _describe, grammar: str | None = None,
         where_learned: bool = False) -> Finding:
    """A finding about every run of `archs` (`_each`)."""
    return Finding(id, claim, _each(archs, test, describe), tuple(archs), grammar=grammar, where_learned=where_learned)


def _not(a: bool | None) -> bool | None:
    return None if a is None else not a


def _and(a: bool | None, b: bool | None) -> bool | None:
    return False if False in (a, b) else None if None in (a, b) else True


def _near_chance(row: pd.Series) -> bool:
    acc, n = _accuracy(row)
    return not above_chance(round(acc * n), n, float(row["chance"]))


def _acc_at_least(row: pd.Series, t: float) -> bool | None:
    """Accuracy >= t, decided by its Wilson interval where the run has one (else its point estimate)."""
    acc, _ = _accuracy(row)
    for name in ("acc_outside", "acc_all"):
        lo, hi = row.get(f"{name}_lo"), row.get(f"{name}_hi")
        if row.get(name) is not None and row.get(name) == row.get(name) and lo == lo and lo is not None:
            return True if lo >= t else False if hi < t else None
    return acc >= t


def _high(row: pd.Series) -> bool | None:
    return _acc_at_least(row, HIGH_ACC)


def _low(row: pd.Series) -> bool | None:
    """Accuracy < POOR_ACC ("fails", "does poorly"), decided by its interval."""
    return _not(_acc_at_least(row, POOR_ACC))


def _label(row: pd.Series, label: str) -> bool | None:
    """The run's verdict is `label` (None where it is inconclusive)."""
    verdict = row.get("verdict")
    return None if verdict == "inconclusive" else verdict == label


def _induction(row: pd.Series) -> bool | None:
    return _and(_high(row), _label(row, "induction"))


def _direct(row: pd.Series) -> bool | None:
    return _and(_high(row), _label(row, "direct retrieval"))


def conv_evidence(run_dir: str) -> dict | None:
    """The conv-window cell restoring most (conv_out, single offset, sufficiency) and the accuracy with
    that layer's conv taps of lag >= 1 zeroed; None where the analysis was not run or found no conv."""
    window, ablation = Path(run_dir) / "conv_window.parquet", Path(run_dir) / "conv_ablation.parquet"
    if not window.exists() or not ablation.exists():
        return None
    best = best_cell(pd.read_parquet(window))
    if best is None:
        return None
    ab = pd.read_parquet(ablation).set_index(["layers", "lags"])
    layer = int(best["layer"])
    cut, base = ab.loc[(str(layer), ">=1")], ab.loc[("none", "none")]
    return {"layer": layer, "offset": int(best["offset"]), "attrib": float(best["attrib"]),
            "lo": float(best["attrib_lo"]), "hi": float(best["attrib_hi"]),
            "acc": float(base["acc"]), "cut_acc": float(cut["acc"]), "cut_n": int(cut["n"])}


def _conv_forms(df: pd.DataFrame) -> Outcome:
    rows = df[(df["arch"] == "mamba") & df["verdict"].notna()]
    rows = rows[rows["verdict"] != "not learned"]
    if rows.empty:
        return Outcome("not run", "no learned, intervened mamba runs")
    statuses, evidence = set(), []
    for _, r in rows.iterrows():
        e = conv_evidence(r["run_dir"])
        if e is None:
            return Outcome("not run", f"no conv-window analysis in {r['run_dir']}")
        statuses.add(_conv_status(e, float(r["chance"])))
        evidence.append(
            f"seed {r['seed']}: conv_out L{e['layer']} key+{e['offset']} restores "
            f"{with_interval(e['attrib'], e['lo'], e['hi'])}; L{e['layer']} taps of lag >= 1 zeroed: acc {e['acc']:.2f} -> "
            f"{e['cut_acc']:.2f} (n={e['cut_n']}, chance {float(r['chance']):.2f})"
        )
    status = next(s for s in ("not reproduced", "inconclusive", "reproduced") if s in statuses)
    return Outcome(status, "; ".join(evidence))


def _conv_status(e: dict, chance: float) -> str:
    """One run's conv cell against the claim: the taps cut must leave accuracy near chance, and the cell's
    95% interval must clear FORMED (reproduced), fall below it (not reproduced) or span it (inconclusive:
    a point estimate of 0.48 or 0.52 on ~250 examples does not decide which side the cell is on)."""
    if above_chance(round(e["cut_acc"] * e["cut_n"]), e["cut_n"], chance) or e["hi"] < FORMED:
        return "not reproduced"
    return "reproduced" if e["lo"] >= FORMED else "inconclusive"


def seed_pairs(a: pd.DataFrame, b: pd.DataFrame) -> list[tuple[pd.Series, pd.Series]]:
    """Runs of a and b paired by seed; every pair where they share no seed."""
    seed = lambda r: r.get("seed", 0)  # noqa: E731
    pairs = [(x, y) for _, x in a.iterrows() for _, y in b.iterrows()]
    same = [(x, y) for x, y in pairs if seed(x) == seed(y)]
    return same or pairs


def _mamba_vs_attention(df: pd.DataFrame) -> Outcome:
    """Mamba at least as accurate as attention (within MARGIN), per grammar and seed, on the same examples: all
    of them, and those outside both models' conv reach (`report.paired`); decided by the paired interval. Runs
    without a grammar are on the task's default, easy."""
    grammar = df[GRAMMAR].fillna("easy") if GRAMMAR in df else pd.Series("easy", index=df.index)
    pairs = [(g, m, a) for g in sorted(grammar.unique())
             for m, a in seed_pairs(_rows(df[grammar == g], "mamba"), _rows(df[grammar == g], "attention"))]
    if not pairs:
        return Outcome("not run", "needs runs of mamba and attention on the same grammar")
    results, evidence = [], []
    for g, m, a in pairs:
        tables = read_examples(m["run_dir"]), read_examples(a["run_dir"])
        if any(t is None for t in tables):
            return Outcome("not run", f"no per-example readout ({EXAMPLES}) in {m['run_dir']} or {a['run_dir']}: "
                           "`mecheval intervene` writes it")
        try:
            table = paired_accuracy(*tables)
        except ValueError as e:
            return Outcome("not run", f"{m['run_dir']} and {a['run_dir']}: {e}")
        results.append(_and(*(at_least_as_accurate(r, MARGIN) for _, r in table.iterrows())))
        evidence.append(f"{g} seed {m.get('seed', 0)}/{a.get('seed', 0)}: " + ", ".join(
            f"{r['subset']} (n={r['n']}) mamba {r['acc_a']:.2f} vs attention {r['acc_b']:.2f}, "
            f"difference {r['diff']:+.2f} [{r['diff_lo']:+.2f}, {r['diff_hi']:+.2f}]" for _, r in table.iterrows()))
    return Outcome(_status(results), _tally(results) + "; ".join(evidence))


STORES_AT_VALUE, RETRIEVES = ("attention", "based"), ("mamba", "h3", "hyena")  # the ATR storage claim's two sides


def _storage(col: str = "attrib@value") -> Callable[[pd.Series], bool | None]:
    """The storage claim's test of a run: `col` (attrib@value, or that on another split) high (>= HIGH) for
    attention and Based, low (< LOW) for Mamba, H3 and Hyena, decided by its 95% interval."""
    def test(row: pd.Series) -> bool | None:
        return _ci_vs(row, col, HIGH, above=True) if row["arch"] in STORES_AT_VALUE else _ci_vs(row, col, LOW, above=False)
    return test


def _describe_value(col: str = "attrib@value", label: str = "@value") -> Callable[[pd.Series], str]:
    """A run's `col` with its interval, named `label`, as the storage claims' evidence."""
    def describe(row: pd.Series) -> str:
        value = with_interval(row.get(col, float("nan")), row.get(f"{col}_lo"), row.get(f"{col}_hi"))
        return f"{row['arch']} seed {row.get('seed', 0)}{_on(row)} {label} {value}"
    return describe


FINDINGS: dict[str, Finding] = {
    f.id: f
    for f in [
        each("attention_induction", "Attention reaches high AR accuracy by induction (attrib@value ≈ 1).", ["attention"], _induction, where_learned=True),
        each("based_induction", "Based reaches high AR accuracy by induction (attrib@value ≈ 1).", ["based"], _induction, where_learned=True),
        each("mamba_direct", "Mamba (d_conv 4) reaches high AR accuracy by direct retrieval (attrib@value ≈ 0).", ["mamba"], _direct, where_learned=True),
        Finding("mamba_conv_forms", "Mamba (d_conv 4) forms the key–value association in its short convolution "
                "(\"Mamba does implement induction … via short convolutions\"): patching one conv output after "
                "the key restores >= 0.5, and zeroing that layer's conv taps of lag >= 1 leaves accuracy at chance.",
                _conv_forms, ("mamba",), where_learned=True),
        each("mamba_noconv_fails", "Mamba without its short convolution (d_conv 0) fails AR (accuracy near chance).",
             ["mamba (d_conv 0)"], _near_chance),
        each("mamba_conv1_fails", "Mamba with d_conv 1 (a conv without lagged taps) fails AR (accuracy near chance).",
             ["mamba (d_conv 1)"], _near_chance),
        each("based_long_fails", "Based with a long convolution in place of its short one fails AR.",
             ["based (d_conv long)"], _near_chance),
        each("h3_hyena_poor", f"H3 and Hyena do poorly on AR (accuracy < {POOR_ACC:g}).", ["h3", "hyena"], _low),
        each("one_layer_fails", f"With 1 layer every architecture of the published depth runs but Mamba (attention, "
             f"Based, H3, Hyena, BaseConv) fails AR (accuracy < {POOR_ACC:g}; attention <= .09 at every width).",
             [arch_label(a, None, 1) for a in DEPTH_ZOO if a != "mamba"], _low),
        each("one_layer_mamba", "With 1 layer Mamba still reaches high AR accuracy (.83 at d = 64).",
             [arch_label("mamba", None, 1)], _high, where_learned=True),
        each("three_layers_learn", "With 3 layers attention and Based reach high AR accuracy (1.0 and .99).",
             [arch_label(a, None, 3) for a in ("attention", "based")], _high, where_learned=True),
        each("attention_needs_positions", f"Attention without position embeddings fails AR (accuracy < {POOR_ACC:g}; "
             "published <= .09).", [arch_label("attention", None, positions="none")], _low),
        each("based_with_positions", "Based with position embeddings still reaches high AR accuracy (.91).",
             [arch_label("based", None, positions="learned")], _high, where_learned=True),
        each("atr_one_layer_convs", "On ATR easy with 1 layer, Based and BaseConv stay below high accuracy (≈ .51).",
             [arch_label(a, None, 1) for a in ("based", "baseconv")], lambda r: _not(_high(r)), grammar="easy"),
        each("atr_one_layer_mamba", "On ATR easy with 1 layer, Mamba reaches high accuracy (.85–.94).",
             [arch_label("mamba", None, 1)], _high, grammar="easy"),
        Finding("atr_mamba_vs_attention", "On ATR, Mamba is at least as accurate as attention on each grammar "
                f"both ran (within {MARGIN}, on the same examples: all, and those outside both conv reaches).",
                _mamba_vs_attention, ("mamba", "attention"), needs_all=True),
        each("atr_storage", "On ATR, only attention and Based store the association at the value (attrib@value high); "
             "Mamba, H3 and Hyena do not.", [*STORES_AT_VALUE, *RETRIEVES], _storage(), _describe_value()),
        each("atr_heldout_storage", "On ATR easy's held-out (query, target) pairs, attention and Based store the "
             "association at the value (attrib@value high; published 1.22 and .87); Mamba, H3 and Hyena do not (≈ 0).",
             [*STORES_AT_VALUE, *RETRIEVES], _storage(HELDOUT_VALUE), _describe_value(HELDOUT_VALUE, "held-out @value"),
             grammar="easy"),
        each("atr_mamba_noconv_induction", "Without its short convolution, Mamba learns induction on ATR (high "
             "attrib@value: accuracy >= 0.8 and attrib@value >= 0.5, each by its 95% interval).", ["mamba (d_conv 0)"],
             lambda r: _and(_high(r), _ci_vs(r, "attrib@value", VALUE_HIGH, above=True))),
    ]
}
