"""The report's first glance, generated from the data: one paragraph and a small table.

Per architecture (best learning rate, every seed): its accuracy with a 95% interval, the mechanism in
words (the verdict, how many seeds gave it, the detail that decides it, and where a short conv binds key
and value), the published mechanism and whether the two agree. The HTML, report.md and the terminal
print the same text.
"""

from __future__ import annotations

import pandas as pd

from mecheval.report.decide import AGREE, DIFFER, FORMED, above

GRAMMAR = "task.params.grammar"


ACCURACIES = ("acc_outside", "acc_all", "acc")  # the accuracy shown: the first present in a row


def with_interval(m, lo, hi) -> str:
    """`0.97 [0.94, 0.98]`; the value alone where there is no interval, `–` where there is no value."""
    if m is None or m != m:
        return "–"
    return f"{m:.2f}" if lo is None or lo != lo else f"{m:.2f} [{lo:.2f}, {hi:.2f}]"


def _number(v) -> float:
    return float("nan") if v is None else float(v)


def shown_accuracy(row: pd.Series) -> tuple[float, float, float, str]:
    """(accuracy, lo, hi, column) of a summary row, lo and hi NaN where there is no interval: accuracy
    outside the conv reach where intervened on; on every intervention example where none lies outside it
    (e.g. H3's whole-context conv); else the final test accuracy."""
    for col in ACCURACIES:
        v = _number(row.get(col))
        if v == v:
            return v, _number(row.get(f"{col}_lo")), _number(row.get(f"{col}_hi")), col
    return float("nan"), float("nan"), float("nan"), "acc"


def by_grammar(arch: pd.Series, grammar: pd.Series | None) -> pd.Series:
    """`arch · grammar` per row where the rows span several grammars, else `arch`: the label of a bar or a
    box, so that one architecture's runs on two grammars are not drawn as one."""
    if grammar is None or grammar.nunique() <= 1:
        return arch
    return arch + " · " + grammar.to_numpy()


def _label(row: pd.Series, summary: pd.DataFrame) -> str:
    """The architecture, with the width and grammar where the study has several."""
    label = row["arch"]
    if summary["model.d_model"].nunique() > 1:
        label += f" d={row['model.d_model']}"
    if GRAMMAR in summary and summary[GRAMMAR].nunique() > 1:
        label += f" · {row[GRAMMAR]}"
    return label


def accuracy_words(row: pd.Series) -> str:
    """`0.97 [0.94, 0.98], 3 seeds`: the accuracy `shown_accuracy` picks, with its interval."""
    text = with_interval(*shown_accuracy(row)[:3])
    if row.get("acc_heldout") is not None and row.get("acc_heldout") == row.get("acc_heldout"):
        text += f", held-out {row['acc_heldout']:.2f}"
    return text + (f", {int(row['seeds'])} seeds" if row["seeds"] > 1 else "")


def verdict_words(row: pd.Series) -> str:
    """`direct retrieval in 2 of 3 seeds (direct retrieval 2, mixed 1)`; the bare verdict for one seed."""
    verdict = row["verdict"]
    if not isinstance(verdict, str):
        return "no verdict"  # not intervened on, or nothing to read (1 layer without a short conv)
    counts = row.get("verdicts")
    if row["seeds"] < 2 or not isinstance(counts, str):
        return verdict
    tally = dict(part.rsplit(" ", 1) for part in counts.split(", "))  # a tie may list the shown verdict second
    k = int(tally.get(verdict, 0))
    return verdict + f" in {k} of {int(row['seeds'])} seeds" + ("" if k == row["seeds"] else f" ({counts})")


def formed_words(row: pd.Series, formed: dict | None) -> str:
    """`key and value meet in layer 1's short conv (...)` where the conv-window analysis found the cell and
    its 95% interval reaches FORMED (a cell at 0.48 [0.42, 0.53] is not evidence against it)."""
    if formed is None or row["verdict"] in (None, "not learned") or above(formed["lo"], formed["hi"], FORMED) is False:
        return ""
    return (f"key and value meet in layer {formed['layer']}'s short conv (its output at key+{formed['offset']} "
            f"restores {formed['attrib']:.2f} [{formed['lo']:.2f}, {formed['hi']:.2f}]; without that layer's "
            f"lagged taps accuracy {formed['acc']:.2f} → {formed['cut_acc']:.2f})")


def mechanism_words(row: pd.Series, formed: dict | None) -> str:
    """The verdict, in how many seeds, the detail that decides it, and the short conv that binds key and value."""
    words = verdict_words(row)
    if isinstance(row.get("detail"), str):
        words += f": {row['detail']}"
    where = formed_words(row, formed)
    return words + (f"; {where}" if where else "")


def overview_table(summary: pd.DataFrame, formed: dict[str, dict]) -> pd.DataFrame:
    """One row per summary row: architecture, accuracy, mechanism (ours), published, agrees.

    formed: arch -> `findings.conv_evidence` of its most accurate run (absent where none was analysed).
    """
    rows = []
    for _, r in summary.iterrows():
        parts = [r["published_verdict"]] if isinstance(r["published_verdict"], str) else []
        if r["published_acc"] == r["published_acc"]:
            parts.append(f"accuracy {r['published_acc']:.2f}")
        pub = ", ".join(parts) or "–"
        rows.append({"architecture": _label(r, summary), "accuracy [95% CI]": accuracy_words(r),
                     "mechanism (ours)": mechanism_words(r, formed.get(r["arch"])), "published": pub,
                     "agrees": r["agree"] or "–"}
                    | ({"formed at step": r["formed_at"] or "–"} if "formed_at" in summary else {}))
    return pd.DataFrame(rows)


def resting_on(summary: pd.DataFrame) -> str:
    """What every statement below rests on: `1 seed each (seed 0), best learning rate; verdicts read on
    384–512 test examples each`."""
    seeds = sorted({int(s) for s in summary["seeds"]})
    n_seeds = f"{seeds[0]} seed{'s' if seeds[0] > 1 else ''}" if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]} seeds"
    text = f"{n_seeds} each"
    if "seed_list" in summary and summary["seed_list"].nunique() == 1:
        text += f" ({'seed' if seeds == [1] else 'seeds'} {summary['seed_list'].iloc[0]})"
    text += ", best learning rate"
    if "n_min" in summary and summary["n_min"].notna().any():
        lo, hi = int(summary["n_min"].min()), int(summary["n_max"].max())
        text += f"; verdicts read on {lo if lo == hi else f'{lo}–{hi}'} test examples each"
    return text


def overview_text(summary: pd.DataFrame, formed: dict[str, dict], findings: list[tuple[str, str]]) -> str:
    """One paragraph: what each architecture does, how that compares with the publication, and the
    published findings reproduced.

    formed: as for `overview_table`; findings: (claim, status) per published finding checked.
    """
    if summary.empty:
        return "No run of this study has finished: the runs table below says what became of each (a run that diverged, why)."
    parts = [f"{len(summary)} architecture{'s' if len(summary) > 1 else ''} ({resting_on(summary)})."]
    for _, r in summary.iterrows():
        agree = {AGREE: ", as published", DIFFER: f", published: {r['published_verdict']}"}.get(r["agree"], "")
        where = formed_words(r, formed.get(r["arch"]))
        parts.append(f"{_label(r, summary)}: {verdict_words(r)}{agree}; accuracy {accuracy_words(r)}"
                     + (f"; {where}." if where else "."))
    done = [c for c, s in findings if s != "not run"]
    if done:
        held = sum(s == "reproduced" for _, s in findings)
        open_ = [c for c, s in findings if s == "inconclusive"]
        missed = [c for c, s in findings if s == "not reproduced"]
        parts.append(f"{held} of {len(done)} published findings checked here reproduce"
                     + (f"; not: {' '.join(missed)}" if missed else "."))
        if open_:
            parts.append(f"Inconclusive (an interval spans the threshold, or an architecture the claim names has not run): {' '.join(open_)}")
    return " ".join(parts)
