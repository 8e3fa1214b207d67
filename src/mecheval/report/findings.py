"""The published findings, each checked against a study's best-learning-rate runs.

A finding reads only the rows of the architectures it names (every seed); where those were not run it
says so. A claim about accuracy and mechanism is judged in two parts (`Outcome.parts`: `accuracy: not
reproduced, mechanism: reproduced` says which half failed); the outcome is the worse part. Seeds are decided
together, never one failing seed against the rest: an accuracy is read per cell (architecture, width,
grammar) as the mean over its seeds with the multi-bootstrap interval (`decide.multi_bootstrap`), so seeds
that disagree leave it inconclusive; a mechanism is read on every seed that learned (a seed that did not
learn has no mechanism to read). `Outcome.seeds` still says how each seed reads on its own.
An ATR claim that names no grammar is read per grammar, and a claim whose runs span several widths per width
(`Finding.check_each`), never pooled across them.
Accuracy is read on the examples outside the conv reach (`acc_outside`, the artefact control) where the run
was intervened on, else the final test accuracy. "High accuracy" is >= HIGH_ACC; "near chance" means not
significantly above the task's chance accuracy (one-sided binomial test, 5%), so a model at 0.45 on 4 pairs
(chance 0.25) is not near chance. Thresholds and decisions: `report.decide`; attributions as in
`mecheval.interventions.verdict`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from mecheval.interventions.conv_window import CELL_COLUMNS, best_cell
from mecheval.interventions.metrics import above_chance
from mecheval.models.presets import arch_label
from mecheval.report.compare import published_accuracy
from mecheval.report.decide import (FORMED, HIGH, HIGH_ACC, INCONCLUSIVE, LOW, MARGIN, NOT_RUN, POOR_ACC,
                                    REPRODUCED, VALUE_HIGH, above, all_of, below, multi_bootstrap, negate, outcome,
                                    worst)
from mecheval.report.overview import GRAMMAR, with_interval
from mecheval.report.paired import EXAMPLES, at_least_as_accurate, paired_runs
from mecheval.report.results import HELDOUT_VALUE
from mecheval.store import runs

# the architectures of the study's depth runs (its appendix figure): the zoo before DeltaNet joined it
DEPTH_ZOO = ("attention", "mamba", "based", "h3", "hyena", "baseconv")
EVAL_N = "eval.size"  # the test examples behind `acc` where a run has no intervention accuracy
# the accuracies a run's row may hold (outside the conv reach, all intervention examples) and their example counts
ACC_READS = (("acc_outside", "n_outside"), ("acc_all", "n_all"))
ACCURACY, MECHANISM = "accuracy", "mechanism"  # the two parts of a claim about both


@dataclass(frozen=True)
class Outcome:
    status: str  # "reproduced" | "not reproduced" | "inconclusive" (an interval spans the threshold, or an architecture the claim names has not run) | "not run"
    evidence: str
    parts: dict[str, str] = field(default_factory=dict)  # part (accuracy, mechanism; or a grammar) -> its status
    seeds: dict[int, str] = field(default_factory=dict)  # seed -> the finding's status on that seed's runs

    def seed_share(self) -> str:
        """`3 of 3 seeds`: the seeds whose runs reproduce the finding, of those read; empty where none was."""
        if not self.seeds:
            return ""
        k = sum(s == REPRODUCED for s in self.seeds.values())
        return f"{k} of {len(self.seeds)} seed{'s' if len(self.seeds) > 1 else ''}"

    def parts_words(self) -> str:
        """`accuracy: not reproduced, mechanism: reproduced`; empty for a claim of one part."""
        return ", ".join(f"{part}: {status}" for part, status in self.parts.items())

    def words(self) -> str:
        """The status with its parts and the share of seeds: `not reproduced (accuracy: not reproduced,
        mechanism: reproduced; 2 of 3 seeds)`."""
        detail = "; ".join(filter(None, (self.parts_words(), self.seed_share())))
        return self.status + (f" ({detail})" if detail else "")


def _grammars(df: pd.DataFrame) -> pd.Series:
    """Each row's ATR grammar (easy, the task's default, where its config names none); None outside ATR."""
    grammar = df[GRAMMAR] if GRAMMAR in df else pd.Series(None, index=df.index, dtype=object)
    atr = df["task.name"] == "atr" if "task.name" in df else pd.Series(grammar.notna().any(), index=df.index)
    return grammar.where(grammar.notna(), "easy").where(atr, None)


def _spans(df: pd.DataFrame, named: pd.DataFrame, by_grammar: bool) -> pd.Series:
    """Each row's span for reading a claim apart: `on GRAMMAR` for an ATR run where `by_grammar`, `at d = W` where
    the claim's runs (`named`) have several widths, joined (`on easy at d = 64`); None where neither applies."""
    grammars = _grammars(df) if by_grammar else pd.Series(None, index=df.index, dtype=object)
    widths = df["model.d_model"] if "model.d_model" in df else pd.Series(None, index=df.index, dtype=object)
    several = widths[named.index].dropna().nunique() > 1
    words = [" ".join(filter(None, (isinstance(g, str) and f"on {g}", several and pd.notna(w) and f"at d = {int(w)}"))) or None
             for g, w in zip(grammars, widths)]
    return pd.Series(words, index=df.index, dtype=object)


def _span_order(span: str) -> tuple:
    """Spans in reading order: by grammar, then by width as a number (d = 16 before d = 128)."""
    grammar, _, width = span.partition("at d = ")
    return grammar, int(width) if width else 0


@dataclass(frozen=True)
class Finding:
    id: str
    claim: str
    test: Callable[[pd.DataFrame], Outcome]
    archs: tuple[str, ...] = ()  # the architectures it is about (labels, `arch`)
    needs_all: bool = False  # a comparison: it applies only where every one of `archs` ran
    grammar: str | None = None  # an ATR claim about one grammar reads only that grammar's runs
    where_learned: bool = False  # a claim of high accuracy: it reads the runs where the study's own is high
    part: str = MECHANISM  # what a claim of one part is about (ACCURACY or MECHANISM)

    def check_each(self, df: pd.DataFrame) -> dict[str, Outcome]:
        """span -> the outcome on that span's best-learning-rate runs (`check_rows`): each ATR grammar the claim's
        runs are on where the claim names none (`on easy`), each width where they span several (`at d = 64`), or
        both (`on easy at d = 64`); {"": the outcome} where the runs span one of each."""
        spans = _spans(df, df[df["arch"].isin(self.archs)] if self.archs else df, by_grammar=not self.grammar)
        labels = sorted(spans.dropna().unique(), key=_span_order)
        if not labels:
            return {"": self.check_rows(df)}
        return {s: self.check_rows(df[spans == s]) for s in labels}

    def check(self, df: pd.DataFrame) -> Outcome:
        """The outcome over every span `check_each` reads apart: the worst of those where the finding ran, each
        such span a part (its words: status, parts and seeds) and its evidence (every span's where the claim
        leaves out widths: `where_learned`)."""
        each = self.check_each(df)
        ran = {g: o for g, o in each.items() if o.status != NOT_RUN}
        if len(each) == 1 or not ran:
            return next(iter(each.values()))
        shown = each if self.where_learned else ran  # a claim of high accuracy says which widths it left out, and why
        evidence = "; ".join(f"{g}: {o.evidence}" for g, o in shown.items())
        return Outcome(worst(o.status for o in ran.values()), evidence, {g: o.words() for g, o in ran.items()})

    def check_rows(self, df: pd.DataFrame) -> Outcome:
        """The outcome on the best-learning-rate runs `df` (those of `grammar` where the claim names one; where
        the claim is one of high accuracy, those at widths where the published accuracy is high too)."""
        if self.grammar:
            df = df[_grammars(df).isin([self.grammar, None])]  # no grammar: not ATR, or the task's default, easy
        if not self.where_learned:
            return self.test(df)
        high = df.apply(_published_high, axis=1).astype(bool) if len(df) else pd.Series(dtype=bool)
        left = sorted({f"{r['arch']} at d = {int(r['model.d_model'])}" for _, r in df[~high].iterrows()
                       if r["arch"] in self.archs})
        result = self.test(df[high])
        if not left:
            return result
        note = f"left out, the published accuracy there being below {HIGH_ACC:g}: {', '.join(left)}"
        return Outcome(result.status, f"{result.evidence}; {note}" if result.status != NOT_RUN else note,
                       result.parts, result.seeds)

    def part_statuses(self, df: pd.DataFrame) -> dict[str, str]:
        """ACCURACY / MECHANISM -> its status over every span `check_each` reads (the worst), for the parts the
        claim has (a claim of one part: its `part`); {} where nothing ran."""
        ran = [o for o in self.check_each(df).values() if o.status != NOT_RUN]
        parts = [o.parts or {self.part: o.status} for o in ran]
        return {k: worst(p[k] for p in parts if k in p) for k in (ACCURACY, MECHANISM) if any(k in p for p in parts)}

    def applies(self, ran: list[str]) -> bool:
        """Does the finding concern the architectures that ran (any of its own; all, for a comparison)?"""
        hits = [a in ran for a in self.archs]
        return all(hits) if self.needs_all else any(hits)


def _published_high(row: pd.Series) -> bool:
    """Is the published accuracy of the run's architecture at its width high (>= HIGH_ACC)? True where the
    study publishes none, or the row does not say its task and width."""
    if not {"task.name", "model.d_model", "arch_name"} <= set(row.index):
        return True
    grammar, conv = row.get(GRAMMAR), row.get("arch_conv")
    published = published_accuracy(row["task.name"], grammar if isinstance(grammar, str) else None, row["arch_name"],
                                    None if conv is None or conv != conv else conv, int(row["model.d_model"]), row["arch"])
    return published is None or published >= HIGH_ACC


def _rows(df: pd.DataFrame, arch: str) -> pd.DataFrame:
    return df[df["arch"] == arch]


def _read(row: pd.Series) -> tuple[str, str] | None:
    """The first of ACC_READS (accuracy column, count column) that `row` has a value for; None: neither."""
    return next(((acc, n) for acc, n in ACC_READS if row.get(acc) is not None and row.get(acc) == row.get(acc)), None)


def _accuracy(row: pd.Series) -> tuple[float, int]:
    """(accuracy, examples): outside the conv reach where intervened on, else the final test accuracy."""
    read = _read(row)
    return (float(row[read[0]]), int(row[read[1]])) if read else (float(row["acc"]), int(row.get(EVAL_N) or 0))


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


Test = Callable[[pd.Series], bool | None]  # one run against a claim (or one part of it): None where undecided


def _seed(row: pd.Series) -> int:
    seed = row.get("seed", 0)
    return 0 if seed is None or seed != seed else int(seed)


def _by_seed(rows: pd.DataFrame, results: list[bool | None], archs: list[str]) -> dict[int, str]:
    """seed -> the outcome on that seed's runs; inconclusive where an architecture the claim names has no run
    of that seed."""
    seeds = [_seed(r) for _, r in rows.iterrows()]
    out = {}
    for seed in sorted(set(seeds)):
        ran = set(rows["arch"][[s == seed for s in seeds]])
        mine = [x for x, s in zip(results, seeds) if s == seed] + ([None] if set(archs) - ran else [])
        out[seed] = outcome(mine)
    return out


def _each(archs: list[str], tests: dict[str, Test],
          describe: Callable[[pd.Series], str] = _describe) -> Callable[[pd.DataFrame], Outcome]:
    """Each part of `tests` decided over seeds (`_over_seeds`: an accuracy once per cell on its pooled seeds, a
    mechanism on each run that learned): reproduced where every named architecture ran and every part passes;
    not reproduced where a part decidedly fails; inconclusive where none fails but one is undecided (an
    interval straddles a threshold) or a named architecture did not run (the claim is about all of them). Each
    part's own outcome where there are several (`Outcome.parts`), and each seed's read on its own. The evidence
    counts the runs that pass on their own, `describe`s each, gives each cell's pooled accuracy, and names the
    architectures that did not run."""

    def check(df: pd.DataFrame) -> Outcome:
        rows = df[df["arch"].isin(archs)]
        if rows.empty:
            return Outcome(NOT_RUN, f"no runs of {', '.join(archs)}")
        results = [all_of(test(r) for test in tests.values()) for _, r in rows.iterrows()]  # each run on its own
        missing = [a for a in archs if a not in set(rows["arch"])]
        undecided = [None] if missing else []  # an architecture the claim names that did not run decides nothing
        pools = [(len(cell), _pool(cell)) for cell in _cells(rows)]
        by_part = {part: _over_seeds(test, rows, pools) + undecided for part, test in tests.items()}
        evidence = _tally(results) + "; ".join(describe(r) for _, r in rows.iterrows()) + _pooled_words(pools)
        if missing:
            evidence += f"; not run: {', '.join(missing)}"
        parts = {part: outcome(r) for part, r in by_part.items()} if len(tests) > 1 else {}
        return Outcome(worst(outcome(r) for r in by_part.values()), evidence, parts, _by_seed(rows, results, archs))

    return check


def pooled(test: Test) -> Test:
    """`test` as a claim about accuracy: `_each` reads it once per cell on the seeds pooled (`_pool`)."""
    def on_pooled(row: pd.Series) -> bool | None:
        return test(row)

    on_pooled.pooled = True
    return on_pooled


def _cells(rows: pd.DataFrame) -> list[pd.DataFrame]:
    """The runs of each cell (architecture, width, grammar): the seeds of one configuration."""
    keys = [k for k in ("arch", "model.d_model", GRAMMAR) if k in rows]
    return [cell for _, cell in rows.groupby([rows[k].astype(str) for k in keys], sort=False)]


def _over_seeds(test: Test, rows: pd.DataFrame, pools: list[tuple[int, pd.Series]]) -> list[bool | None]:
    """A test's decisions over seeds: an accuracy test (`pooled`) once per cell on its pooled seeds (`pools`:
    (seeds, `_pool` row) per cell); any other on each run that learned (none learned: undecided)."""
    if getattr(test, "pooled", False):
        return [test(row) for _, row in pools]
    learned = [test(r) for _, r in rows.iterrows() if r.get("verdict") != "not learned"]
    return learned or [None]


def _pool(cell: pd.DataFrame) -> pd.Series:
    """One row for the seeds of a cell: each accuracy (`ACC_READS`, and `acc`) the mean over seeds, with the
    multi-bootstrap interval where every seed has one, its example counts summed; a read that some seed lacks is
    left empty (NaN), so that no seed's own value passes for the cell's."""
    row = cell.iloc[0].copy()
    if len(cell) == 1:
        return row
    for name, n in ACC_READS:
        if {name, f"{name}_lo", f"{name}_hi", n} <= set(cell) and cell[[name, f"{name}_lo", n]].notna().all(axis=None):
            row[name] = cell[name].mean()
            row[f"{name}_lo"], row[f"{name}_hi"] = multi_bootstrap(
                list(cell[name]), list(cell[f"{name}_lo"]), list(cell[f"{name}_hi"]), list(cell[n]))
            row[n] = int(cell[n].sum())
        else:
            row[[c for c in (name, f"{name}_lo", f"{name}_hi") if c in row.index]] = float("nan")
    row["acc"] = cell["acc"].mean()
    return row


def _pooled_words(pools: list[tuple[int, pd.Series]]) -> str:
    """The pooled accuracy of each cell with several seeds (`pools` as `_over_seeds`'), in words (empty where none has)."""
    words = []
    for seeds, row in pools:
        if seeds > 1:
            name = (_read(row) or ("acc",))[0]
            lo, hi = row.get(f"{name}_lo"), row.get(f"{name}_hi")
            shown = with_interval(row[name], lo, hi) if lo == lo and lo is not None else f"{row[name]:.2f}"
            words.append(f"{row['arch']} d={row['model.d_model']}{_on(row)} over {seeds} seeds: acc {shown}")
    return "; " + "; ".join(words) if words else ""


def _tally(results: list[bool | None]) -> str:
    return f"{results.count(True)} of {len(results)} runs pass, {results.count(None)} undecided: "


def _ci_vs(row: pd.Series, col: str, t: float, above_t: bool) -> bool | None:
    """`col` >= t (above_t) or < t (not above_t), decided by its 95% interval (`col`_lo, `col`_hi: `decide.above`);
    None where the interval straddles t or the run has no such reading."""
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    return above(lo, hi, t) if above_t else below(lo, hi, t)


def each(id: str, claim: str, archs: list[str], test: Test | dict[str, Test],
         describe: Callable[[pd.Series], str] = _describe, grammar: str | None = None,
         where_learned: bool = False) -> Finding:
    """A finding about every run of `archs` (`_each`): `test` one run's, or part -> its test for a claim of
    several parts (ACCURACY, MECHANISM)."""
    tests = test if isinstance(test, dict) else {"": test}
    part = ACCURACY if getattr(test, "pooled", False) else MECHANISM  # a claim of one part: which
    return Finding(id, claim, _each(archs, tests, describe), tuple(archs), grammar=grammar, where_learned=where_learned,
                   part=part)


def _near_chance(row: pd.Series) -> bool:
    acc, n = _accuracy(row)
    return not above_chance(round(acc * n), n, float(row["chance"]))


def _acc_at_least(row: pd.Series, t: float) -> bool | None:
    """Accuracy >= t, decided by its Wilson interval where the run has one (else its point estimate)."""
    for name, _ in ACC_READS:
        value, lo = row.get(name), row.get(f"{name}_lo")
        if value is not None and value == value and lo is not None and lo == lo:
            return above(lo, row.get(f"{name}_hi"), t)
    return _accuracy(row)[0] >= t


def _high(row: pd.Series) -> bool | None:
    return _acc_at_least(row, HIGH_ACC)


def _low(row: pd.Series) -> bool | None:
    """Accuracy < POOR_ACC ("fails", "does poorly"), decided by its interval."""
    return negate(_acc_at_least(row, POOR_ACC))


def _label(label: str) -> Test:
    """The run's verdict is `label` (None where it is inconclusive)."""
    def test(row: pd.Series) -> bool | None:
        verdict = row.get("verdict")
        return None if verdict == INCONCLUSIVE else verdict == label
    return test


def _learned_by(label: str) -> dict[str, Test]:
    """A claim of high accuracy by a mechanism, in its two parts: accuracy high, the verdict `label`."""
    return {ACCURACY: pooled(_high), MECHANISM: _label(label)}


def conv_evidence(run_dir: str) -> dict | None:
    """The conv-window cell restoring most (conv_out, single offset, sufficiency) and the accuracy with
    that layer's conv taps of lag >= 1 zeroed; None where the analysis was not run or found no conv."""
    window, ablation = Path(run_dir) / "conv_window.parquet", Path(run_dir) / "conv_ablation.parquet"
    if not window.exists() or not ablation.exists():
        return None
    best = best_cell(runs.table(window, CELL_COLUMNS))
    if best is None:
        return None
    ab = runs.table(ablation, ("layers", "lags", "acc", "n")).set_index(["layers", "lags"])
    layer = int(best["layer"])
    cut, base = ab.loc[(str(layer), ">=1")], ab.loc[("none", "none")]
    return {"layer": layer, "offset": int(best["offset"]), "attrib": float(best["attrib"]),
            "lo": float(best["attrib_lo"]), "hi": float(best["attrib_hi"]),
            "acc": float(base["acc"]), "cut_acc": float(cut["acc"]), "cut_n": int(cut["n"])}


def _conv_forms(df: pd.DataFrame) -> Outcome:
    rows = df[(df["arch"] == "mamba") & df["verdict"].notna()]
    rows = rows[rows["verdict"] != "not learned"]
    if rows.empty:
        return Outcome(NOT_RUN, "no learned, intervened mamba runs")
    results, evidence = [], []
    for _, r in rows.iterrows():
        e = conv_evidence(r["run_dir"])
        if e is None:
            return Outcome(NOT_RUN, f"no conv-window analysis in {r['run_dir']}")
        results.append(_conv_formed(e, float(r["chance"])))
        evidence.append(
            f"seed {r['seed']}: conv_out L{e['layer']} key+{e['offset']} restores "
            f"{with_interval(e['attrib'], e['lo'], e['hi'])}; L{e['layer']} taps of lag >= 1 zeroed: acc {e['acc']:.2f} -> "
            f"{e['cut_acc']:.2f} (n={e['cut_n']}, chance {float(r['chance']):.2f})"
        )
    return Outcome(outcome(results), "; ".join(evidence), seeds=_by_seed(rows, results, ["mamba"]))


def _conv_formed(e: dict, chance: float) -> bool | None:
    """One run's conv cell against the claim: the taps cut must leave accuracy near chance, and the cell's
    95% interval must clear FORMED (True), fall below it (False) or span it (None: a point estimate of 0.48
    or 0.52 on ~250 examples does not decide which side the cell is on)."""
    cut_near_chance = not above_chance(round(e["cut_acc"] * e["cut_n"]), e["cut_n"], chance)
    return all_of([cut_near_chance, above(e["lo"], e["hi"], FORMED)])


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
        return Outcome(NOT_RUN, "needs runs of mamba and attention on the same grammar")
    results, evidence = [], []
    for g, m, a in pairs:
        try:
            table = paired_runs(m["run_dir"], a["run_dir"])
        except ValueError as e:
            return Outcome(NOT_RUN, str(e))
        if table is None:
            return Outcome(NOT_RUN, f"no per-example readout ({EXAMPLES}) in {m['run_dir']} or {a['run_dir']}: "
                           "`mecheval intervene` writes it")
        results.append(all_of(at_least_as_accurate(r, MARGIN) for _, r in table.iterrows()))
        evidence.append(f"{g} seed {m.get('seed', 0)}/{a.get('seed', 0)}: " + ", ".join(
            f"{r['subset']} (n={r['n']}) mamba {r['acc_a']:.2f} vs attention {r['acc_b']:.2f}, "
            f"difference {r['diff']:+.2f} [{r['diff_lo']:+.2f}, {r['diff_hi']:+.2f}]" for _, r in table.iterrows()))
    seeds = [_seed(m) for _, m, _ in pairs]
    by_seed = {s: outcome(x for x, t in zip(results, seeds) if t == s) for s in sorted(set(seeds))}
    return Outcome(outcome(results), _tally(results) + "; ".join(evidence), seeds=by_seed)


STORES_AT_VALUE, RETRIEVES = ("attention", "based"), ("mamba", "h3", "hyena")  # the ATR storage claim's two sides


def _storage(col: str = "attrib@value") -> Callable[[pd.Series], bool | None]:
    """The storage claim's test of a run: `col` (attrib@value, or that on another split) high (>= HIGH) for
    attention and Based, low (< LOW) for Mamba, H3 and Hyena, decided by its 95% interval."""
    def test(row: pd.Series) -> bool | None:
        return _ci_vs(row, col, HIGH, True) if row["arch"] in STORES_AT_VALUE else _ci_vs(row, col, LOW, False)
    return test


def _describe_value(col: str = "attrib@value", label: str = "@value") -> Callable[[pd.Series], str]:
    """A run's `col` with its interval, named `label`, as the storage claims' evidence."""
    def describe(row: pd.Series) -> str:
        value = with_interval(row.get(col, float("nan")), row.get(f"{col}_lo"), row.get(f"{col}_hi"))
        return f"{row['arch']} seed {row.get('seed', 0)}{_on(row)} {label} {value}"
    return describe


def _describe_twist(row: pd.Series) -> str:
    """The ATR twist as measured: accuracy, the shares at the value and at the query with their intervals, and
    the project's own label beside the published criterion (@value >= VALUE_HIGH)."""
    shares = ", ".join(f"{label} {with_interval(row.get(col), row.get(f'{col}_lo'), row.get(f'{col}_hi'))}"
                       for label, col in (("@value", "attrib@value"), ("@query", "attrib@query")))
    criterion = {True: "met", False: "not met", None: "undecided"}[_ci_vs(row, "attrib@value", VALUE_HIGH, True)]
    acc, n = _accuracy(row)
    return (f"{row['arch']} seed {_seed(row)}{_on(row)}: acc {acc:.2f} (n={n}), {shares}; our label: "
            f"{row.get('verdict') if isinstance(row.get('verdict'), str) else 'none'}, published criterion "
            f"@value >= {VALUE_HIGH:g}: {criterion}")


FINDINGS: dict[str, Finding] = {
    f.id: f
    for f in [
        each("attention_induction", "Attention reaches high AR accuracy by induction (attrib@value ≈ 1).", ["attention"],
             _learned_by("induction"), where_learned=True),
        each("based_induction", "Based reaches high AR accuracy by induction (attrib@value ≈ 1).", ["based"],
             _learned_by("induction"), where_learned=True),
        each("mamba_direct", "Mamba (d_conv 4) reaches high AR accuracy by direct retrieval (attrib@value ≈ 0).", ["mamba"],
             _learned_by("direct retrieval"), where_learned=True),
        Finding("mamba_conv_forms", "Mamba (d_conv 4) forms the key–value association in its short convolution "
                "(\"Mamba does implement induction … via short convolutions\"): patching one conv output after "
                "the key restores >= 0.5, and zeroing that layer's conv taps of lag >= 1 leaves accuracy at chance.",
                _conv_forms, ("mamba",), where_learned=True),
        each("mamba_noconv_fails", "Mamba without its short convolution (d_conv 0) fails AR (accuracy near chance).",
             ["mamba (d_conv 0)"], pooled(_near_chance)),
        each("mamba_conv1_fails", "Mamba with d_conv 1 (a conv without lagged taps) fails AR (accuracy near chance).",
             ["mamba (d_conv 1)"], pooled(_near_chance)),
        each("based_long_fails", "Based with a long convolution in place of its short one fails AR.",
             ["based (d_conv long)"], pooled(_near_chance)),
        each("h3_hyena_poor", f"H3 and Hyena do poorly on AR (accuracy < {POOR_ACC:g}).", ["h3", "hyena"], pooled(_low)),
        each("one_layer_fails", f"With 1 layer every architecture of the published depth runs but Mamba (attention, "
             f"Based, H3, Hyena, BaseConv) fails AR (accuracy < {POOR_ACC:g}; attention <= .09 at every width).",
             [arch_label(a, None, 1) for a in DEPTH_ZOO if a != "mamba"], pooled(_low)),
        each("one_layer_mamba", "With 1 layer Mamba still reaches high AR accuracy (.83 at d = 64).",
             [arch_label("mamba", None, 1)], pooled(_high), where_learned=True),
        each("three_layers_learn", "With 3 layers attention and Based reach high AR accuracy (1.0 and .99).",
             [arch_label(a, None, 3) for a in ("attention", "based")], pooled(_high), where_learned=True),
        each("attention_needs_positions", f"Attention without position embeddings fails AR (accuracy < {POOR_ACC:g}; "
             "published <= .09).", [arch_label("attention", None, positions="none")], pooled(_low)),
        each("based_with_positions", "Based with position embeddings still reaches high AR accuracy (.91).",
             [arch_label("based", None, positions="learned")], pooled(_high), where_learned=True),
        each("atr_one_layer_convs", "On ATR easy with 1 layer, Based and BaseConv stay below high accuracy (≈ .51).",
             [arch_label(a, None, 1) for a in ("based", "baseconv")], pooled(lambda r: negate(_high(r))), grammar="easy"),
        each("atr_one_layer_mamba", "On ATR easy with 1 layer, Mamba reaches high accuracy (.85–.94).",
             [arch_label("mamba", None, 1)], pooled(_high), grammar="easy"),
        Finding("atr_mamba_vs_attention", "On ATR, Mamba is at least as accurate as attention on each grammar "
                f"both ran (within {MARGIN}, on the same examples: all, and those outside both conv reaches).",
                _mamba_vs_attention, ("mamba", "attention"), needs_all=True, part=ACCURACY),
        each("atr_storage", "On ATR, only attention and Based store the association at the value (attrib@value high); "
             "Mamba, H3 and Hyena do not.", [*STORES_AT_VALUE, *RETRIEVES], _storage(), _describe_value()),
        each("atr_heldout_storage", "On ATR easy's held-out (query, target) pairs, attention and Based store the "
             "association at the value (attrib@value high; published 1.22 and .87); Mamba, H3 and Hyena do not (≈ 0).",
             [*STORES_AT_VALUE, *RETRIEVES], _storage(HELDOUT_VALUE), _describe_value(HELDOUT_VALUE, "held-out @value"),
             grammar="easy"),
        each("atr_mamba_noconv_induction", "Without its short convolution, Mamba learns induction on ATR, by the "
             f"published criterion: accuracy >= {HIGH_ACC:g} and attrib@value >= {VALUE_HIGH:g}, each by its 95% "
             "interval (weaker than this project's `induction` label, which each run's evidence names beside it).",
             ["mamba (d_conv 0)"], {ACCURACY: pooled(_high), MECHANISM: lambda r: _ci_vs(r, "attrib@value", VALUE_HIGH, True)},
             _describe_twist),
    ]
}


def claim_on(claim: str, span: str) -> str:
    """The claim as read on one span (`Finding.check_each`): `… (on easy at d = 64).`; the claim itself where
    `span` is empty."""
    return f"{claim.removesuffix('.')} ({span})." if span else claim


def checked(fids: list[str], best: pd.DataFrame) -> list[tuple[str, str, Outcome]]:
    """(id, claim, outcome) of each finding `fids` on the best-learning-rate runs `best`, one per span (grammar,
    width) where it is read apart (`Finding.check_each`, `claim_on`)."""
    return [(f, claim_on(FINDINGS[f].claim, g), o) for f in fids for g, o in FINDINGS[f].check_each(best).items()]


def finding_row(claim: str, o: Outcome) -> dict[str, str]:
    """A finding for people: the claim, our outcome, its parts (accuracy, mechanism), the share of seeds that
    reproduce it and the evidence (`–` where a cell has nothing)."""
    return {"published finding": claim, "ours": o.status, "parts": o.parts_words() or "–",
            "seeds": o.seed_share() or "–", "evidence": o.evidence}

