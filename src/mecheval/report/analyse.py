"""A study's report as data: `load` reads a study directory (study.json and its runs' table), `analyse` returns
its `Tables` (the best runs summarised, the findings checked, every further table), which tests check directly
and `build.render` only formats, draws and writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mecheval.common import ConfigError
from mecheval.interventions.accuracy import ACCURACY_COLUMNS
from mecheval.interventions.state_readout import COLUMNS as STATE_COLUMNS, state_summary
from mecheval.interventions.verdict import shows_attributions
from mecheval.report.compare import published_accuracy, published_heldout, published_verdict
from mecheval.report.decide import compare_accuracy, compare_labels, interval_over_seeds
from mecheval.report.findings import FINDINGS, Outcome, checked, conv_evidence, seed_pairs
from mecheval.report.fit import fit_table
from mecheval.report.overview import GRAMMAR, with_interval
from mecheval.report.paired import paired_runs
from mecheval.report.results import HELDOUT_READ_ACC, HELDOUT_VALUE, study_table
from mecheval.report.timelines import formation_steps, timeline_table
from mecheval.report.widths import spans_widths, width_table
from mecheval.store import runs as store_runs, studies

def study_meta(study_dir: Path) -> dict:
    """study.json (`store.studies.meta`: {} where absent) with `findings` a list of known findings; ConfigError
    naming the file otherwise."""
    meta = studies.meta(study_dir)
    unknown = [f for f in meta.get("findings", []) if not isinstance(f, str) or f not in FINDINGS]
    if unknown:
        raise ConfigError(f"{Path(study_dir) / studies.STUDY_JSON}: unknown findings {unknown}; known: {', '.join(FINDINGS)}")
    return meta


@dataclass
class StudyData:
    """A study (or sweep) directory's data as read (`load`)."""

    dir: Path
    meta: dict  # its study.json (`study_meta`; {} where absent)
    runs: pd.DataFrame  # one row per run (`results.study_table`)


def load(study_dir: str | Path) -> StudyData:
    """The study in `study_dir`: its study.json, checked, and its runs' table."""
    study_dir = Path(study_dir)
    return StudyData(study_dir, study_meta(study_dir), study_table(study_dir))


@dataclass
class Tables:
    """What a study's report says, as data (`analyse`)."""

    study: StudyData
    summary: pd.DataFrame  # `summarise`, with `formed_at` (per seed, the step its mechanism formed) where timed
    best: pd.DataFrame  # the runs at their architecture's best learning rate
    findings: list[tuple[str, Outcome]]  # (claim, outcome) per finding of study.json about the study's architectures
    left_out: int  # the findings of study.json about architectures not in the study
    formed: dict[str, dict]  # arch -> the conv evidence of its most accurate best-lr run that has one
    timelines: dict  # run_dir -> (its timeline, the step its final mechanism formed at): `formation_steps`
    widths: pd.DataFrame | None  # `width_table`, where the best runs span several widths
    artefact: pd.DataFrame  # `artefact_table`
    fit: pd.DataFrame  # `fit_table`
    paired: pd.DataFrame  # `like_for_like_table`
    formation: pd.DataFrame  # `formation_table`
    over_training: pd.DataFrame  # `timeline_table`
    states: pd.DataFrame  # `state_table`
    seeds: pd.DataFrame | None  # `seeds_table`: None for one seed


def analyse(study: StudyData) -> Tables:
    """The study's tables, read from its runs' table and the files beside each best-lr run."""
    df, meta = study.runs, study.meta
    summary = summarise(df)
    best = df[df["best_lr"]]
    archs = list(dict.fromkeys(df["arch"]))
    applicable = [f for f in meta.get("findings", []) if FINDINGS[f].applies(archs)]
    evidence = conv_evidence_by_run(best)
    timelines = formation_steps(best)
    if timelines:  # per row, the step each seed's final mechanism formed at (`–`: never, or not learned)
        steps = {d: ("–" if s is None else str(s)) for d, (_, s) in timelines.items()}
        by_arch = best.groupby("arch", sort=False)["run_dir"].agg(lambda ds: ", ".join(steps[d] for d in ds if d in steps))
        summary["formed_at"] = summary["arch"].map(by_arch).fillna("")
    return Tables(study, summary, best, findings=[(claim, o) for _, claim, o in checked(applicable, best)],
                  left_out=len(meta.get("findings", [])) - len(applicable), formed=_formed(best, evidence),
                  timelines=timelines, widths=width_table(summary, df) if spans_widths(summary) else None,
                  artefact=artefact_table(best), fit=fit_table(best), paired=like_for_like_table(best),
                  formation=formation_table(best, evidence), over_training=timeline_table(best, timelines),
                  states=state_table(best), seeds=seeds_table(df))


MEANS = ("acc", "acc_heldout", "acc_outside", "acc_all", "attrib@key", "attrib@value", "attrib@query", HELDOUT_READ_ACC,
         HELDOUT_VALUE, "effect")
INTERVALS = ("acc_outside", "acc_all", "attrib@key", "attrib@value", "attrib@query", HELDOUT_READ_ACC,
             HELDOUT_VALUE)  # shown with a 95% interval


def _listed(seeds: pd.Series) -> str:
    """`0, 1, 2`: the seeds of a group, sorted."""
    return ", ".join(str(int(v)) for v in sorted(set(seeds.dropna())))


def _mode(values: pd.Series):
    """The most common value (ties: the first in sorted order), counting decided verdicts only (an
    `inconclusive` one where no seed was decided); None where all are missing."""
    decided = values[values != "inconclusive"].dropna()
    counts = (decided if len(decided) else values.dropna()).value_counts()
    return None if counts.empty else sorted(counts[counts == counts.max()].index)[0]


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Best-lr runs, one row per (arch, width[, grammar]): accuracy averaged over seeds (`seeds` counts them),
    attributions over the seeds that learned (a run that did not has no mechanism to read: its attributions are
    noise), the most common verdict, the task's chance accuracy where the runs' table has it, and the published
    figures beside."""
    best = df[df["best_lr"]].copy()
    if "verdict" in best:
        noise = [c for c in best if c.startswith(("attrib@", "window@"))]
        best.loc[~best["verdict"].map(shows_attributions), noise] = float("nan")
    by = ["arch", "model.d_model", "optim.lr"] + ([GRAMMAR] if GRAMMAR in best else [])
    means = [c for c in MEANS if c in best]
    g = best.groupby(by, sort=False, dropna=False)
    out = g[means].mean().join(g.agg(seeds=("seed", "nunique"), verdict=("verdict", _mode), task=("task.name", "first"),
                                     verdicts=("verdict", _counts), seed_list=("seed", _listed)))
    if "n" in best:  # the examples each verdict was read on (outside the conv reach), least and most over seeds
        out = out.join(g.agg(n_min=("n", "min"), n_max=("n", "max")))
    if "chance" in best:  # the task's chance accuracy (one task per row)
        out = out.join(g.agg(chance=("chance", "first")))
    shown = [c for c in INTERVALS if c in best]
    bounds = {key: {c: interval_over_seeds(part, c) for c in shown} for key, part in g}
    for c in shown:
        out[f"{c}_lo"] = [bounds[k][c][0] for k in out.index]
        out[f"{c}_hi"] = [bounds[k][c][1] for k in out.index]
    if "detail" in best:  # the detail of the most accurate seed whose verdict is the most common one
        out["detail"] = [_detail(part, out.at[key, "verdict"]) for key, part in g]
    out = out.reset_index()
    grammar = out[GRAMMAR] if GRAMMAR in out else pd.Series(None, index=out.index)
    parts = df.drop_duplicates("arch").set_index("arch")  # each label's (name, conv), as data
    out["published_acc"] = [published_accuracy(t, gr, parts.at[a, "arch_name"], parts.at[a, "arch_conv"], int(w), a)
                            for t, gr, a, w in zip(out["task"], grammar, out["arch"], out["model.d_model"])]
    out["published_verdict"] = [published_verdict(t, a) for t, a in zip(out["task"], out["arch"])]
    out["agree"] = [compare_labels(o, p) for o, p in zip(out["verdict"], out["published_verdict"])]
    heldout = "acc_heldout" in out
    if heldout:
        pub = [published_heldout(a, int(w)) for a, w in zip(out["arch"], out["model.d_model"])]
        out["published_heldout_acc"] = [a for a, _ in pub]
        out["published_heldout_value"] = [v for _, v in pub]
        none = pd.Series(float("nan"), index=out.index)  # the held-out readout's accuracy against the study's
        out["heldout_agree"] = [compare_accuracy(m, lo, hi, p) for m, lo, hi, p in zip(
            out.get(HELDOUT_READ_ACC, none), out.get(f"{HELDOUT_READ_ACC}_lo", none),
            out.get(f"{HELDOUT_READ_ACC}_hi", none), out["published_heldout_acc"])]
    shown_grammar = [GRAMMAR] if GRAMMAR in out and out[GRAMMAR].nunique() > 1 else []
    with_ci = [x for c in shown for x in (c, f"{c}_lo", f"{c}_hi")]
    cols = ["arch", *shown_grammar, "model.d_model", "optim.lr", "seeds", "acc", *(["chance"] if "chance" in out else []),
            *(["acc_heldout", *[c for c in with_ci if c.startswith(HELDOUT_READ_ACC)], "published_heldout_acc",
               "heldout_agree"] if heldout else []), *[c for c in with_ci if c.startswith("acc")],
            "published_acc", "verdict", "verdicts", *(["detail"] if "detail" in out else []), "published_verdict",
            "agree", *[c for c in with_ci if "attrib@" in c], *(["published_heldout_value"] if heldout else []),
            "effect", "seed_list", *([c for c in ("n_min", "n_max") if c in out])]
    for c in ("attrib@key", "attrib@value", "attrib@query"):
        if c not in cols:
            cols.insert(cols.index("effect"), c)
    floats = {c: float for c in ("published_acc", "published_heldout_acc", "published_heldout_value") if c in cols}
    return out[cols].astype(floats).reset_index(drop=True)


def _counts(values: pd.Series) -> str:
    """How many seeds got each verdict, e.g. `induction 1, direct retrieval 2` (most common first)."""
    counts = values.dropna().value_counts()
    return ", ".join(f"{label} {n}" for label, n in counts.items())


def _detail(part: pd.DataFrame, verdict) -> str | None:
    rows = part[part["verdict"] == verdict] if isinstance(verdict, str) else part
    rows = rows.dropna(subset=["detail"])
    return None if rows.empty else rows.sort_values("acc", ascending=False)["detail"].iloc[0]


def seeds_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """Per (arch, width, lr): accuracy over seeds (`acc_mean`, `acc_std`, `acc_min`, `acc_max`) and attrib@value
    over the seeds that learned the task (`value_mean`, `value_std`, `learned`; blank where none did); None for
    one seed."""
    if df["seed"].nunique() < 2:
        return None
    g = df.groupby(["arch", "model.d_model", "optim.lr"], sort=False)
    out = g.agg(seeds=("seed", "nunique"), acc_mean=("acc", "mean"), acc_std=("acc", "std"),
                acc_min=("acc", "min"), acc_max=("acc", "max"))
    learned = df[df["verdict"].notna() & (df["verdict"] != "not learned")]
    if not learned.empty:
        value = learned.groupby(["arch", "model.d_model", "optim.lr"], sort=False)["attrib@value"]
        out = out.join(value.agg(value_mean="mean", value_std="std", learned="count"))
    return out.reset_index()


def artefact_table(best: pd.DataFrame) -> pd.DataFrame:
    """Per best-lr run: accuracy (Wilson interval, n) on all / outside / inside examples."""
    rows = []
    for _, r in best.iterrows():
        path = Path(r["run_dir"]) / "accuracy.parquet"
        if not path.exists():
            continue
        acc = store_runs.table(path, ACCURACY_COLUMNS).set_index("subset")
        row = {"arch": r["arch"], "seed": r["seed"]}
        for subset in ("all", "outside", "inside"):
            if subset in acc.index and acc.at[subset, "n"] > 0:
                a = acc.loc[subset]
                row[subset] = f"{a['acc']:.2f} [{a['acc_lo']:.2f}, {a['acc_hi']:.2f}] (n={int(a['n'])})"
            else:
                row[subset] = "–"
        rows.append(row)
    return pd.DataFrame(rows)


def like_for_like_table(best: pd.DataFrame, reference: str = "attention") -> pd.DataFrame:
    """Each best-lr architecture against `reference` on the same examples (`report.paired`), per seed pair:
    accuracy of both on all examples and on those outside both conv reaches, the difference with its 95%
    paired interval. Empty where the reference was not run or the runs lack examples.parquet."""
    ref = best[best["arch"] == reference]
    rows = []
    for arch, part in best[best["arch"] != reference].groupby("arch", sort=False):
        for a, b in seed_pairs(part, ref):
            table = paired_runs(a["run_dir"], b["run_dir"])
            if table is None:
                continue
            for _, r in table.iterrows():
                rows.append({"arch": arch, "vs": reference, "seeds": f"{a.get('seed', 0)} / {b.get('seed', 0)}",
                             "examples": r["subset"], "n": r["n"], "acc": r["acc_a"], f"acc {reference}": r["acc_b"],
                             "difference [95% CI]": f"{r['diff']:+.2f} [{r['diff_lo']:+.2f}, {r['diff_hi']:+.2f}]"})
    return pd.DataFrame(rows)


def conv_evidence_by_run(best: pd.DataFrame) -> dict[str, dict]:
    """run_dir -> `findings.conv_evidence`, for the best-lr runs whose conv-window analysis ran."""
    runs = [d for d in best["run_dir"] if isinstance(d, str)] if "run_dir" in best else []
    return {d: e for d in runs if (e := conv_evidence(d)) is not None}


def formation_table(best: pd.DataFrame, evidence: dict[str, dict]) -> pd.DataFrame:
    """Per best-lr run with a conv-window analysis (`evidence`, from `conv_evidence_by_run`): the cell that
    restores most and the tap ablation; the width `d` where the runs span several (the binding layer may move)."""
    widths = "model.d_model" in best and best["model.d_model"].nunique() > 1
    rows = []
    for _, r in best.iterrows():
        e = evidence.get(r.get("run_dir"))
        if e is None:
            continue
        noise = r.get("verdict") == "not learned"  # the best cell of a model that did not learn is noise
        rows.append({"arch": r["arch"], **({"d": int(r["model.d_model"])} if widths else {}), "seed": r["seed"],
                     "verdict": r.get("verdict"),
                     "cell": "–" if noise else f"conv_out L{e['layer']} key+{e['offset']}",
                     "restores": "–" if noise else f"{e['attrib']:.2f} [{e['lo']:.2f}, {e['hi']:.2f}]",
                     "acc": f"{e['acc']:.2f}", "acc, taps of that layer zeroed": "–" if noise else f"{e['cut_acc']:.2f} (n={e['cut_n']})"})
    return pd.DataFrame(rows)


def run_state_summary(run_dir: str | Path) -> pd.DataFrame:
    """`state_summary` of a run's state readout (state_curve.parquet); empty where the run has none."""
    path = Path(str(run_dir)) / "state_curve.parquet"
    return state_summary(store_runs.table(path, STATE_COLUMNS)) if path.exists() else pd.DataFrame()


def state_table(best: pd.DataFrame) -> pd.DataFrame:
    """Per best-lr run that learned the task, with a state readout (state_curve.parquet), and per layer: where
    the association enters the state, how far on it keeps it (`state_summary`'s `held`), how much it restores,
    and how much the state carries when the answer is read."""
    rows = []
    for _, r in best.iterrows():
        if r.get("verdict") == "not learned":  # nothing to restore: attributions are noise
            continue
        for _, s in run_state_summary(r.get("run_dir")).iterrows():
            rows.append({"arch": r["arch"], "seed": r["seed"], "mechanism": r.get("verdict"), "layer": int(s["layer"]),
                         "enters at": f"key+{int(s['enters'])}", "held to": f"key+{int(s['held'])}",
                         "most restored": with_interval(s["peak"], s["peak_lo"], s["peak_hi"]),
                         "before the answer": with_interval(s["last"], s["last_lo"], s["last_hi"]), "n": int(s["last_n"])})
    return pd.DataFrame(rows)


def _formed(best: pd.DataFrame, evidence: dict[str, dict]) -> dict[str, dict]:
    """arch -> conv evidence of its most accurate best-lr run that has one."""
    out = {}
    for _, r in best.sort_values("acc", ascending=False).iterrows():
        if r.get("run_dir") in evidence:
            out.setdefault(r["arch"], evidence[r["run_dir"]])
    return out


def best_runs(table: pd.DataFrame, seeds: list[int] | None = None) -> pd.DataFrame:
    """The rows of a `study_table` at each architecture's best learning rate, of `seeds` only where given."""
    return table[table["best_lr"] & (table["seed"].isin(seeds) if seeds is not None else True)]


def study_findings(study_dir: str | Path, seeds: list[int] | None = None, table: pd.DataFrame | None = None) -> dict[str, Outcome]:
    """finding id -> its outcome on the study's best-learning-rate runs (of `seeds` only where given), for the
    findings the study checks; `table`: the study's `study_table`, where the caller has read it already."""
    study_dir = Path(study_dir)
    best = best_runs(study_table(study_dir) if table is None else table, seeds)
    return {f: FINDINGS[f].check(best) for f in study_meta(study_dir).get("findings", [])}
