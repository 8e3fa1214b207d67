"""Today's mixers on AR and ATR easy (the `modern` and `modern-atr` studies): per architecture and short conv,
accuracy over seeds, the verdicts' shares, where key and value meet, and Mamba-3's question (RWKV-7's too): does
one of the mixer's own terms (its two-token term, its rotation) play the short conv's role?

Where key and value meet, per learned run (`meeting_words`), each reading the run has:
    short conv   the conv-window cell restoring most and the accuracy with that layer's taps of lag >= 1 zeroed
                 (`findings.conv_evidence`, as for Mamba)
    a term       the mixer's term (`interventions.terms.TERMS`: Mamba-3's two-token term and rotation, RWKV-7's
                 token shift) zeroed in every layer, and as its control at the value position alone and
                 everywhere but there (where the table has them)
    the state    where neither is read (no conv, no term of its own): what each layer's recurrent state carries of
                 the key, from where to where (`state_words`)
The answer (`term_answer`), per term and architecture with its reading, over the learned seeds: the
multi-bootstrap interval of the accuracy with the term zeroed in every layer. Wholly below POOR_ACC: the term plays
the conv's role (it binds key and value); at or above HIGH_ACC: it does not; else inconclusive. The same rule reads
Mamba's conv taps. On ATR, where the value does not always follow its key, the answer's sentence adds the position
controls read apart by that distance, averaged over the seeds (`distance_words`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mecheval.interventions.terms import AT, NOT, SPAN, TERMS, Term
from mecheval.interventions.verdict import NOT_LEARNED
from mecheval.report.analyse import run_state_summary
from mecheval.report.decide import HIGH_ACC, INCONCLUSIVE, POOR_ACC, above, below, interval_over_seeds
from mecheval.report.findings import conv_evidence
from mecheval.store import runs as store_runs

TERM_COLUMNS = ("layers", "acc", "acc_lo", "acc_hi", "n")
PLAYS, DOES_NOT = "plays the conv's role", "does not play the conv's role"


def term_read(run_dir: str | Path, term: Term) -> dict | None:
    """A run's table of `term` (two_token.parquet, rotary.parquet): the accuracy unablated and with the term zeroed
    in every layer (its interval and n), and the position controls: `alone` {role: accuracy with the term zeroed
    at that role's position alone}, `elsewhere` {role: everywhere but there}, in the table's order (tables
    written before every role was read have the value's only); `by_distance` {`adjacent`, `apart`: the same read on
    those examples alone (`terms.term_ablation`), with their `n`}, empty for AR and tables written before the
    split; None where the analysis was not run or the model has no such term."""
    path = Path(run_dir) / term.file
    if not path.exists():
        return None
    table = store_runs.table(path, TERM_COLUMNS)
    by = table["examples"] if "examples" in table else pd.Series("all", index=table.index)  # before the split
    parts = {name: part.set_index("layers") for name, part in table.groupby(by, sort=False)}
    table = parts.pop("all")
    if len(table) < 2:
        return None
    whole = [layers for layers in table.index if layers != "none" and "@" not in layers]
    every = max(whole, key=lambda layers: layers.count("+"))  # "0+1": all layers at once
    cut = table.loc[every]
    return {"acc": float(table.loc["none", "acc"]), "acc_lo": float(table.loc["none", "acc_lo"]),
            "acc_hi": float(table.loc["none", "acc_hi"]), "cut_acc": float(cut["acc"]), "cut_lo": float(cut["acc_lo"]),
            "cut_hi": float(cut["acc_hi"]), "cut_n": int(cut["n"]), "layers": every, **_controls(table, every),
            "by_distance": {name: {"acc": float(part.loc["none", "acc"]), "cut_acc": float(part.loc[every, "acc"]),
                                   "n": int(part.loc["none", "n"]), **_controls(part, every)}
                            for name, part in parts.items()}}


def _controls(table: pd.DataFrame, every: str) -> dict:
    """{`alone`: {place: accuracy with the term zeroed there alone}, `elsewhere`: {place: everywhere but there}}
    from a term table indexed by `layers`."""
    return {kind: {layers.removeprefix(every + prefix): float(table.loc[layers, "acc"]) for layers in table.index
                   if layers.startswith(every + prefix) and (kind == "elsewhere") == layers.startswith(every + NOT)}
            for kind, prefix in (("alone", AT), ("elsewhere", NOT))}


def positions_words(alone: dict[str, float], elsewhere: dict[str, float]) -> str:
    """The position controls in words: the accuracy with the term zeroed at each role's position alone, and
    everywhere but the role where that hurts most; `` where none was read."""
    if not alone:
        return ""
    worst = min(alone, key=alone.get)
    rest = f"; everywhere but the {worst} → {elsewhere[worst]:.2f}" if worst in elsewhere else ""
    return f" (at one position alone: {', '.join(f'{role} {acc:.2f}' for role, acc in alone.items())}{rest})"


def state_words(run_dir: str) -> str:
    """What each layer's recurrent state carries of the key (`analyse.run_state_summary`: from where to where it
    restores at least half its most, that most, and what is left before the answer), in words; `` without a state
    readout."""
    parts = []
    for _, s in run_state_summary(run_dir).iterrows():
        span = (f"after key+{s['enters']:.0f} alone" if s["held"] == s["enters"]
                else f"from key+{s['enters']:.0f} to key+{s['held']:.0f}")
        parts.append(f"layer {s['layer']:.0f}'s state carries the key {span} (restores up to {s['peak']:.2f}), "
                     f"{round(s['last'], 2) + 0.0:.2f} before the answer")
    return f"recurrent state: {'; '.join(parts)}" if parts else ""


def meeting_words(run_dir: str) -> str:
    """Where key and value meet in one learned run, in words with its numbers, each analysis the run has (a short
    conv's, each term's); where none has (a mixer without a conv or a term of its own), what each layer's state
    carries of the key (`state_words`); `–` where nothing says."""
    words = []
    conv = conv_evidence(run_dir)
    if conv is not None:
        words.append(f"short conv of layer {conv['layer']} (key+{conv['offset']} restores {conv['attrib']:.2f}; "
                     f"lagged taps zeroed: {conv['acc']:.2f} → {conv['cut_acc']:.2f})")
    for term in TERMS.values():
        read = term_read(run_dir, term)
        if read is not None:
            words.append(f"{term.words} zeroed in layers {read['layers']}: {read['acc']:.2f} → "
                         f"{read['cut_acc']:.2f}{positions_words(read['alone'], read['elsewhere'])}")
    return ", ".join(words) or state_words(run_dir) or "–"


def term_archs(best: pd.DataFrame, term: Term) -> list[str]:
    """The architectures with a reading of `term` in a learned best-learning-rate run (`term_answer` reads them)."""
    runs = learned(best)
    return sorted({r["arch"] for _, r in runs.iterrows() if term_read(r["run_dir"], term) is not None})


def learned(best: pd.DataFrame) -> pd.DataFrame:
    """The best-learning-rate runs that learned (an intervened run whose verdict is not `not learned`)."""
    return best[best["verdict"].notna() & (best["verdict"] != NOT_LEARNED)]


def term_answer(best: pd.DataFrame, arch: str, term: Term) -> tuple[str, str]:
    """(status, sentence): does `arch`'s `term` play the short conv's role (module docstring)? Decided over its
    learned best-learning-rate runs whose accuracy with the term in place lies above POOR_ACC by its interval (in
    one at or below it, a fall below POOR_ACC could not show: it is named as left out); status PLAYS, DOES_NOT or
    INCONCLUSIVE."""
    runs = best[best["arch"] == arch]
    reads = [(r["seed"], term_read(r["run_dir"], term)) for _, r in learned(runs).iterrows()]
    reads = [(seed, read) for seed, read in reads if read is not None]
    retrieves = [above(read["acc_lo"], read["acc_hi"], POOR_ACC, strict=True) is True for _, read in reads]
    low = [pair for pair, ok in zip(reads, retrieves) if not ok]
    reads = [pair for pair, ok in zip(reads, retrieves) if ok]
    left_out = "".join(f" Seed {int(seed)} left out: {read['acc']:.2f} with the term in place, not above {POOR_ACC:g}."
                       for seed, read in low)
    if not reads:
        return INCONCLUSIVE, (f"{arch}: no learned run with the {term.analysis} analysis that retrieves above "
                              f"{POOR_ACC:g} ({len(runs)} run(s) at the best learning rate): the question is open."
                              f"{left_out}")
    cut = [read["cut_acc"] for _, read in reads]
    lo, hi = interval_over_seeds(pd.DataFrame({  # over seeds and their examples, as every accuracy over seeds is
        "acc_cut": cut, "acc_cut_lo": [r["cut_lo"] for _, r in reads], "acc_cut_hi": [r["cut_hi"] for _, r in reads],
        "n_cut": [r["cut_n"] for _, r in reads]}), "acc_cut")
    mean, base = sum(cut) / len(cut), sum(r["acc"] for _, r in reads) / len(reads)
    status = PLAYS if below(lo, hi, POOR_ACC) else DOES_NOT if above(lo, hi, HIGH_ACC) else INCONCLUSIVE
    seeds = ", ".join(str(int(s)) for s, _ in reads)
    broken = sum(read["cut_hi"] < POOR_ACC for _, read in reads)
    why = {PLAYS: f"the term **{PLAYS}** (the interval lies below {POOR_ACC:g})",
           DOES_NOT: f"the term **{DOES_NOT}** (the interval lies at or above {HIGH_ACC:g})",
           INCONCLUSIVE: f"**{INCONCLUSIVE}**: the interval spans {POOR_ACC:g} or {HIGH_ACC:g} (below {POOR_ACC:g} the "
                         f"term plays the conv's role, at or above {HIGH_ACC:g} it does not)"}[status]
    roles = [role for role in reads[0][1]["alone"] if all(role in r["alone"] and role in r["elsewhere"] for _, r in reads)]
    mean_of = lambda kind: {role: sum(r[kind][role] for _, r in reads) / len(reads) for role in roles}  # noqa: E731
    control = ("" if not roles else
               f" On average over the {len(reads)} seed{'s' if len(reads) > 1 else ''}"
               f"{positions_words(mean_of('alone'), mean_of('elsewhere'))}.")
    return status, (f"{arch}: zeroing the {term.words} in every layer takes accuracy from {base:.2f} to "
                    f"{mean:.2f} [{lo:.2f}, {hi:.2f}] (multi-bootstrap over seeds and examples) over its {len(reads)} "
                    f"learned seed{'s' if len(reads) > 1 else ''} ({seeds}; of {len(runs)}), below {POOR_ACC:g} in "
                    f"{broken} of them by its own interval: {why}.{control}{distance_words([r for _, r in reads])}"
                    f"{left_out}")


DISTANCES = {"adjacent": "where the value follows its key", "apart": "where they lie apart"}
PLACES = {("alone", "value"): "at the value alone", ("elsewhere", "value"): "everywhere but the value",
          ("alone", SPAN): "on the stretch key+1 … value alone", ("elsewhere", SPAN): "everywhere but that stretch"}


def distance_words(reads: list[dict]) -> str:
    """The position controls read apart by the key–value distance (`term_read`'s `by_distance`), averaged over the
    runs, in words; `` where a run lacks them (AR, tables written before the split)."""
    names = [name for name in DISTANCES if reads and all(name in r["by_distance"] for r in reads)]
    if not names:
        return ""
    parts = []
    for name in names:
        mean = lambda get, name=name: sum(get(r["by_distance"][name]) for r in reads) / len(reads)  # noqa: E731
        controls = ", ".join(f"{PLACES[kind, place]} {mean(lambda d: d[kind][place]):.2f}"
                             for place in reads[0]["by_distance"][name]["alone"] for kind in ("alone", "elsewhere"))
        parts.append(f"{DISTANCES[name]} ({mean(lambda d: d['n']):.0f} examples a seed): {mean(lambda d: d['acc']):.2f}"
                     f" → {mean(lambda d: d['cut_acc']):.2f} in every layer; {controls}")
    return f" By the key–value distance, on average over the seeds: {'; '.join(parts)}."


def modern_rows(summary: pd.DataFrame, best: pd.DataFrame) -> list[dict]:
    """One row per architecture (`analyse.summarise`'s rows, best learning rate): its conv, seeds, accuracy with
    its interval, the verdicts' shares, and where key and value meet in each learned seed."""
    rows = []
    for _, r in summary.iterrows():
        runs = learned(best[best["arch"] == r["arch"]]).sort_values("seed")
        meet = "; ".join(f"seed {int(x['seed'])}: {meeting_words(x['run_dir'])}" for _, x in runs.iterrows())
        rows.append({"architecture": r["arch"], "lr": f"{r['optim.lr']:g}", "seeds": r["seed_list"],
                     "accuracy [95%]": f"{r['acc_outside']:.2f} [{r['acc_outside_lo']:.2f}, {r['acc_outside_hi']:.2f}]",
                     "verdicts": r["verdicts"], "where key and value meet": meet or "–"})
    return rows
