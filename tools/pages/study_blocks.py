"""The `studies`, `widths` and `modern` blocks: one study's section (what it ran, its findings, its runs, the
readouts beyond the verdict), accuracy against width, and the modern mixers' pool."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from mecheval.interventions.runs import verdict_is_current
from mecheval.interventions.terms import TERMS
from mecheval.report.analyse import state_table, study_meta, summarise
from mecheval.report.compare import heldout_cells, published_accuracy, published_heldout, published_verdict
from mecheval.report.decide import RULE, compare_accuracy
from mecheval.report.findings import conv_evidence
from mecheval.report.fit import FIT_NOTE, any_fits_only, fit_table
from mecheval.report.results import HELDOUT_READ_ACC, HELDOUT_VALUE
from mecheval.report.timelines import formation_steps, timeline_table
from mecheval.report.widths import readable_widths, spans_widths, width_table
from mecheval.store import studies as store_studies
from mecheval.study.command import rebuilds_spec, study_command
from mecheval.sweeps.runner import RUNS, SPEC
from mecheval.sweeps.spec import run_overrides
from pages.base import (EARLIER_NOTE, EARLIER_RULES, FIGURE_DIR, PageError, anchor, args_text, chosen_studies,
                        findings_checked, interval, markdown_table, num, runs_table)
from pages.markup import md_code, md_text
from pages.modern import modern_rows, term_answer, term_archs
from pages.pool_blocks import cached_pool, left_out_line
from pages.pooled import left_out

WIDTH_DIR = FIGURE_DIR / "widths"  # per study spanning several widths: SCALE-NAME.csv (checked like a page) and .png


def _conv_binding(row: pd.Series) -> str:
    if row.get("verdict") in (None, "not learned") or row.get("verdict") != row.get("verdict"):
        return "–"  # the best cell of a model that did not learn is noise
    e = conv_evidence(row["run_dir"])
    if e is None:
        return "–"
    return f"layer {e['layer']} key+{e['offset']}: {e['attrib']:.2f}; taps cut → {e['cut_acc']:.2f}"


def _accuracy_read(row: pd.Series) -> str:
    """The readout's accuracy outside the conv reach with its n (all examples where none lies outside)."""
    for col, n in (("acc_outside", "n_outside"), ("acc_all", "n_all")):
        if row.get(col) is not None and row.get(col) == row.get(col):
            suffix = "" if col == "acc_outside" else ", all"
            return f"{interval(row, col)} ({int(row[n])}{suffix})"
    return "–"


def _steps(row: pd.Series) -> str:
    steps = row.get("summary.steps")
    if steps is None or steps != steps:
        return "–"
    return f"{int(steps):,}" + (" (early stop)" if row.get("summary.stopped_early") is True else "")


def run_rows(study: Path) -> list[dict]:
    """One row per finished run of the study (every run directory, sweep.yaml or not)."""
    df = runs_table(str(study))
    df = df[df["status"] == "done"].sort_values(["arch", "model.d_model", "optim.lr", "seed"], kind="stable")
    heldout = "acc_heldout" in df and df["acc_heldout"].notna().any()
    named = not (study / SPEC).exists()
    widths = df["model.d_model"].nunique()  # a width column only where the study varies it (else in its heading)
    rows = []
    for _, r in df.iterrows():
        learned = isinstance(r.get("verdict"), str) and r["verdict"] != "not learned"
        task, grammar = r["task.name"], r.get("task.params.grammar")
        pub_acc = published_accuracy(task, grammar if isinstance(grammar, str) else None, r["arch_name"],
                                     r["arch_conv"], int(r["model.d_model"]), r["arch"])
        pub_verdict = published_verdict(task, r["arch"])
        row = {"run": md_text(r["name"])} if named else {}  # hand-made runs: the name says what differs
        row |= {"architecture": md_text(r["arch"]), **({"d": int(r["model.d_model"])} if widths > 1 else {}),
                "lr": f"{r['optim.lr']:g}",
                "seed": int(r["seed"]), "test acc": num(r["acc"], 3)}
        if heldout:  # the generalisation split: accuracy and @value on the held-out pairs, the study's beside
            pub_acc_heldout, pub_value = published_heldout(r["arch"], int(r["model.d_model"]))
            acc, lo, compared = num(r.get("acc_heldout"), 3), r.get(f"{HELDOUT_READ_ACC}_lo"), ""
            if lo is not None and lo == lo:  # read on held-out examples too: that accuracy's interval, compared
                acc += f"; {interval(r, HELDOUT_READ_ACC)} on {int(r['heldout.n_all'])}"
                compared = compare_accuracy(r[HELDOUT_READ_ACC], lo, r[f"{HELDOUT_READ_ACC}_hi"], pub_acc_heldout)
            row |= heldout_cells(acc, pub_acc_heldout, compared, interval(r, HELDOUT_VALUE) if learned else "–", pub_value)
        verdict = r["verdict"] if isinstance(r.get("verdict"), str) else "not read"
        if verdict != "not read" and not verdict_is_current(Path(r["run_dir"])):
            verdict += " " + EARLIER_RULES
        row |= {"acc outside conv reach (n)": _accuracy_read(r), "published acc": num(pub_acc),
                "verdict (published)": verdict + (f" ({pub_verdict})" if pub_verdict else ""),
                **{f"@{role}": interval(r, f"attrib@{role}") if learned else "–" for role in ("key", "value", "query")},
                "conv binding": _conv_binding(r), "steps": _steps(r)}
        rows.append(row)
    return rows


def _task_line(study: Path) -> str:
    df = runs_table(str(study))
    first = df.iloc[0]
    params = {k.removeprefix("task.params."): v for k, v in first.items()
              if k.startswith("task.params.") and v is not None and v == v}
    shown = ", ".join(md_text(f"{k} {v}") for k, v in params.items()) or "its default parameters, the published ones"
    layers = sorted(df["model.n_layers"].dropna().astype(int).unique())
    widths = sorted(df["model.d_model"].dropna().astype(int).unique())
    return (f"Task {md_code(first['task.name'])} ({shown}); {'/'.join(map(str, layers))} layer{'' if layers == [1] else 's'} of width "
            f"{'/'.join(map(str, widths))}; "
            f"{(done := int((df['status'] == 'done').sum()))} finished run{'' if done == 1 else 's'}.")


def widths_data(root: Path, study: Path) -> pd.DataFrame | None:
    """`widths.width_table` of the study's best-learning-rate runs; None where they span one width."""
    df = runs_table(str(root / study))
    summary = summarise(df)
    return width_table(summary, df) if spans_widths(summary) else None


def width_files(study: Path) -> tuple[Path, Path]:
    """(CSV, PNG) of the study's accuracy-against-width figure, relative to the repository."""
    return WIDTH_DIR / f"{anchor(study)}.csv", WIDTH_DIR / f"{anchor(study)}.png"


def width_section(root: Path, study: Path, page: Path) -> str:
    """The figure (linked from `page`) and the table of accuracy against width; empty for one width."""
    table = widths_data(root, study)
    if table is None:
        return ""
    png = os.path.relpath(width_files(study)[1], page.parent).replace(os.sep, "/")
    return "\n".join([
        f"Accuracy against width ({md_text(f'{study.parent.name}/{study.name}')}; best learning rate per width; ours, the final "
        f"test accuracy on every test prompt as the published ones were read, solid with 95% intervals, published "
        f"dashed), compared by intervals: {RULE}.", "",
        f"![Accuracy against width, ours beside the published values]({png})", "",
        markdown_table(readable_widths(table).astype(str).to_dict("records")), ""])


def widths_block(root: Path, args: dict[str, str], page: Path) -> str:
    sections = [width_section(root, s, page) for s in chosen_studies(root, "widths", args, page)]
    return "\n".join(filter(None, sections)) or "(no study here spans several widths yet)"


def made_by(path: Path, command: str) -> str:
    """`Made by COMMAND.`, saying where the preset has changed since (`rebuilds_spec`) and where earlier calls
    made some of the runs (run directories the spec does not name)."""
    named = {name for name, _ in run_overrides(store_studies.spec(path / SPEC))}
    runs = {d.name for d in (path / RUNS).iterdir() if d.is_dir()} if (path / RUNS).is_dir() else set()
    text = f"Made by {md_code(command)}" if runs <= named else (
        f"{md_code(command)} makes {len(runs & named)} of its {len(runs)} runs; earlier calls made the others (each run's "
        "`config.yaml` says how)")
    return text + ("." if rebuilds_spec(path) is not False else " (the preset has changed since: the command makes "
                   "today's version, and the directory's `sweep.yaml` is what ran).")


def study_section(root: Path, study: Path, page: Path) -> str:
    """A study's heading, what it ran, its findings, its runs and, where computed, the readouts beyond
    the verdict."""
    path = root / study
    meta = study_meta(path)
    preset = (f" Preset {md_code(meta['preset'])}, {md_text(meta.get('scale', study.parent.name))} scale."
              if "preset" in meta else "")
    out = [f'<a id="{anchor(study)}"></a>', "", f"### {md_text(study.name)} ({md_text(study.parent.name)})", "",
           f"{md_code(study)}.{preset} " + _task_line(path)
           + (f" {md_text(meta['description'])}" if meta.get("description") else "")
           + (" Report: `report.md` in the directory (`mecheval report DIR` writes the self-contained `report.html`"
              " beside it)." if (path / "report.md").exists() else ""), ""]
    command = study_command(path, out=str(study))
    if command:  # what made it, and resumes it
        out += [made_by(path, command), ""]
    rows = findings_checked(meta.get("findings", []), runs_table(str(path)))
    if rows:
        out += ["Findings, on the best-learning-rate runs:", "", markdown_table(rows), ""]
    runs = run_rows(path)
    out += ["Runs (acc outside the conv reach and attributions: 95% intervals; `–` where a run did not learn):",
            "", markdown_table(runs), ""]
    if left_out(runs_table(str(path))):
        out += [left_out_line(root, runs_table(str(path))), ""]
    widths = width_section(root, study, page)
    if widths:
        out += [widths]
    if any(EARLIER_RULES in r["verdict (published)"] for r in runs):
        out += [f"{EARLIER_RULES} Verdict {EARLIER_NOTE}", ""]
    every = runs_table(str(path))
    every = every[every["status"] == "done"]
    states = state_table(every)
    if not states.empty:
        out += ["What the recurrent state carries (per layer: where the association enters the state, how far on "
                "it holds it, the most it restores, and what it carries when the answer is read):", "",
                markdown_table(states.astype(str).to_dict("records")), ""]
    out += _fit_lines(every)
    timelines = formation_steps(every)
    over = timeline_table(every, timelines) if timelines else pd.DataFrame()
    if not over.empty:
        out += ["Over training (snapshots; a step at chance reads not learned; formed at: the first kept step from which the final verdict holds):", "",
                markdown_table(over.astype(str).to_dict("records")), ""]
    return "\n".join(out).rstrip() + "\n"


def modern_block(root: Path, args: dict[str, str], page: Path) -> str:
    """The chosen studies read as one (`pooled.pooled_table`: seeds of another study join the same best rate):
    `modern.modern_rows` and, per term and architecture with its reading, `modern.term_answer`'s sentence."""
    chosen = chosen_studies(root, "modern", args, page)
    try:
        df = cached_pool(root, tuple(chosen))
    except ValueError as e:
        raise PageError(f"{page}: generated block 'modern {args_text(args)}': {e}") from None
    best = df[df["best_lr"]]
    out = [f"{', '.join(md_code(s) for s in chosen)}{' read as one' if len(chosen) > 1 else ''}:", "",
           markdown_table(modern_rows(summarise(df), best)), ""]
    for term in TERMS.values():
        out += [line for arch in term_archs(best, term) for line in (term_answer(best, arch, term)[1], "")]
    out += _fit_lines(best)
    over_training = timeline_table(best, formation_steps(best))
    if not over_training.empty:
        out += ["Over training (the runs kept with snapshots, `timeline.parquet`: the readouts at every kept step on "
                "the same examples; a step at chance reads not learned); formed at: the first kept step from which the verdict "
                "stays the final one:", "",
                markdown_table(over_training.sort_values(["arch", "seed"]).to_dict("records")), ""]
    return "\n".join(out)


def _fit_lines(runs: pd.DataFrame) -> list[str]:
    """The fit-to-the-training-set table of `runs` (`fit.fit_table`) with its note, where one of them reads
    `fits its training set only`; else nothing."""
    fit = fit_table(runs)
    return ["Fit to the training set. " + FIT_NOTE, "", markdown_table(fit.to_dict("records")), ""] if any_fits_only(fit) else []


def studies_block(root: Path, args: dict[str, str], page: Path) -> str:
    return "\n".join(study_section(root, s, page) for s in chosen_studies(root, "studies", args, page))


def draw_widths(table: pd.DataFrame, path: Path) -> None:
    """`widths.width_figure` of a `width_table` (read back from its CSV) as an optimised PNG at `path`."""
    from mecheval.report.figures import colours
    from mecheval.report.widths import width_figure
    from pages.study_figure import save_figure

    save_figure(width_figure(table, colours(list(dict.fromkeys(table["arch"])))), path)
