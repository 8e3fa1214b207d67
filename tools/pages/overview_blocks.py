"""The blocks read across every committed study: `rates`, `coverage`, `protocol`, `costs`, `prompts`, `pointers`
and the trial sweeps' `design`."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pandas as pd

from mecheval.common import flatten
from mecheval.report.decide import HIGH_ACC, RULE
from mecheval.store import runs as store_runs
from mecheval.sweeps.runner import RUNS
from mecheval.training.run_dir import RunDir
from pages.base import (FIGURE_DIR, PageError, args_text, chosen_studies, interval, markdown_table, num, runs_table,
                        studies, study_link)
from pages.markup import md_code, md_text
from pages.protocol import CONSISTENT, HIGHER, LOWER, OPEN, PUBLISHED_N, TAIL, joint_lower, protocol_table
from pages.rates import (SEEDS_WANTED, bracket_table, committed_runs, coverage_summary, coverage_table, rate_figure,
                         rate_table)

RATES_DATA, RATES_PNG = FIGURE_DIR / "rates.csv", FIGURE_DIR / "rates.png"  # the `rates` block's figure
# published-scale studies of other builds and protocols (Mamba's initialisations, attention's data protocols):
# not cells of the published tables, so left out of the rates and the coverage
EXPLORATIONS = ("paper-d64/mamba-published", "paper-d64/attention-protocol")


def _minutes(values: pd.Series) -> str:
    """Median minutes per run, with the range where runs differ; – where none recorded it."""
    m = (values.dropna().astype(float) / 60).sort_values()
    if m.empty:
        return "–"
    lo, med, hi = m.iloc[0], m.median(), m.iloc[-1]
    return f"{med:.0f}" if round(lo) == round(hi) else f"{med:.0f} ({lo:.0f}–{hi:.0f})"


def cost_rows(root: Path, args: dict[str, str], page: Path) -> list[dict]:
    """Per chosen study (`chosen_studies`), and per architecture with `by=arch`: the finished runs' steps and minutes
    per run. Wall minutes are one thread's per run (the studies' workers train with one thread each, two at
    once on two cores, often beside other work, so they overstate the core-minutes); CPU minutes are the
    training process's own CPU time (summary.json `cpu_time_s`, recorded since 2026-12-03); device, where the
    runs trained (`cpu`, `cuda`: on a GPU the CPU minutes are the process's, not the GPU's)."""
    rows = []
    for study in chosen_studies(root, "costs", {k: v for k, v in args.items() if k != "by"}, page):
        df = runs_table(str(root / study))
        df = df[df["status"] == "done"]
        if df.empty:  # a study still training: no finished run to cost yet
            continue
        groups = df.groupby("arch", sort=True) if args.get("by") == "arch" else [(None, df)]
        for arch, part in groups:
            cpu = part["summary.cpu_time_s"] if "summary.cpu_time_s" in part else pd.Series(dtype=float)
            steps = part["summary.steps"].dropna().astype(int)
            rows.append({"study": md_text(f"{study.parent.name}/{study.name}"), **({"architecture": md_text(arch)} if arch else {}),
                         "runs": len(part), "steps per run": f"{int(steps.median()):,}" if len(steps) else "–",
                         "wall min per run": _minutes(part["summary.wall_time_s"]), "CPU min per run": _minutes(cpu),
                         "steps/s": num(part["summary.steps_per_s"].median(), 1),
                         "device": ", ".join(sorted(part["summary.device"].dropna().unique())) if "summary.device" in part else "–"})
    return rows


@functools.lru_cache(maxsize=None)
def rates_data(root: Path) -> pd.DataFrame:
    """`rates.rate_table` of every published-scale study's runs (results/paper-d*/, but EXPLORATIONS), each run's
    `study` its study's path relative to `root`."""
    chosen = [s for s in studies(root) if s.parent.name.startswith("paper-d")
              and f"{s.parent.name}/{s.name}" not in EXPLORATIONS]
    return rate_table(committed_runs([runs_table(str(root / s)).assign(study=s) for s in chosen]))


def rates_block(root: Path, page: Path, index: dict[Path, Path]) -> str:
    """The rates figure, how many cells tried how many rates and have their best bracketed, and the cells that
    do not agree with the study (`rates.bracket_table`), each with the part that differs."""
    table = rates_data(Path(root))
    if table.empty:
        raise PageError(f"{page}: the rates block finds no published-scale runs (results/paper-d*/)")
    cells = table[table["best"]]
    rel = os.path.relpath(RATES_PNG, page.parent).replace(os.sep, "/")
    apart = bracket_table(table, link=lambda study: study_link(root, page, study, index))
    return (f"![Accuracy and verdict of every published-scale cell at every learning rate tried]({rel})\n\n"
            f"{len(cells)} cells (task, grammar, architecture, width) at the published scale. Each is compared like "
            f"for like: its best rate is chosen among the rates the study swept for its table (seven for AR's "
            f"architectures, depths and Mamba's conv sizes, five, up to 3e-3, for Based's conv sizes, the position "
            f"variants and every ATR table); a rate beyond them is shown, faded, and not chosen. "
            f"{int((cells['rates'] >= 3).sum())} tried 3 or more of those rates; the best rate is bracketed, by a worse "
            f"rate or the end of the study's grid on each side, in {int(cells['bracketed'].sum())} (in the figure: a "
            f"solid outline), at the edge of what was tried in {int((~cells['bracketed']).sum())} (dashed). The "
            f"{len(apart)} cells whose accuracy at "
            f"their best rate does not agree with the published value, with the part that differs (each rate's mean "
            f"accuracy, ×n: its seeds where more than one; the best rate in bold, chosen on the seeds every rate ran, "
            f"so that it can have the lower mean where it alone ran more seeds; the mechanism: our most common verdict "
            f"at that rate, the published label in brackets; next: the runs that would settle the cell, the grid's rate "
            f"beyond a best at the edge (the study's grid) or, where a bracketed best still differs, the seeds it lacks of "
            f"{SEEDS_WANTED}; min a run: the median minutes of training one of its runs, CPU minutes where recorded; "
            f"studies: the studies whose runs these are, each linked to its section, which gives the command that made "
            f"it and resumes it):\n\n"
            + markdown_table(apart.to_dict("records")))


def coverage_block(root: Path) -> str:
    """The coverage counts (`rates.coverage_summary`) and the rule that compares."""
    summary = coverage_summary(coverage_table(rates_data(Path(root))))
    return (markdown_table(summary.to_dict("records")) + f"\n\nCompared: a cell with a committed run at the published "
            f"scale; its accuracy is the best rate's (mean over seeds). {RULE}")


def protocol_block(root: Path, args: dict[str, str], page: Path) -> str:
    """The published reading simulated from our runs (`protocol.protocol_table`), for the cells of `task=` (and
    `grammar=`, where given), with the outcomes counted."""
    table = protocol_table(rates_data(Path(root)))
    table = table[(table["task"] == args.get("task", table["task"])) & (table["grammar"] == args.get("grammar", table["grammar"]))]
    if table.empty:
        raise PageError(f"{page}: generated block 'protocol {args_text(args)}': no cell with a published value and runs")
    rows = [{"cell": f"{r.task.upper()}{' ' + r.grammar if r.grammar else ''} {r.arch} d={r.width}",
             "rates (runs)": r.rates, "published": f"{'≤ ' if r.bound else ''}{r.published:.4g}",
             "the study's reading of our runs [95%]": f"{r.median:.3f} [{r.lo:.3f}, {r.hi:.3f}]",
             "share ≥ published": f"{r.p_at_least:.3f}", "share ≤ published": f"{r.p_at_most:.3f}",
             "outcome": r.outcome} for r in table.itertuples()]
    counts = table["outcome"].value_counts()
    cells, joint = joint_lower(table)
    together = (f" Taken together (Fisher's combination of the shares ≥ published over the {cells} cells whose best "
                f"rate is bracketed and that do not read higher), ours read lower than the study's protocol would "
                f"with p {'< 0.001' if joint < 0.001 else f'= {joint:.3f}'}." if cells > 1 else "")
    return (f"{len(table)} cells: " + ", ".join(f"{counts.get(o, 0)} {o}" for o in (CONSISTENT, LOWER, HIGHER, OPEN))
            + f" ({PUBLISHED_N} test examples a reading, the maximum over the rates we ran among those the study "
            f"swept; a share under {TAIL} on either side decides; `open`: ours lower with the best rate not "
            f"bracketed).{together}\n\n" + markdown_table(rows))


def _design(config) -> dict:
    """A run's identity (the fields that change its weights or metrics) as flat fields without its seed: what a
    trial sweep holds fixed."""
    return {k: v for k, v in flatten(config.identity()).items() if k != "seed" and v != "{}"}


def _differences(trial: dict, main: list[dict]) -> str:
    """How `trial` differs from the nearest of the main job's designs (the fewest fields apart)."""
    if not main:
        return "–"
    nearest = min(main, key=lambda m: sum(trial.get(k) != m.get(k) for k in trial.keys() | m.keys()))
    apart = sorted(k for k in trial.keys() | nearest.keys() if trial.get(k) != nearest.get(k))
    return "; ".join(f"{k} {_value(nearest.get(k))} → {_value(trial.get(k))}" for k in apart) or "none"


def _value(v) -> str:
    """A config value as the table shows it (None: the field is not set, so its default holds)."""
    return "default" if v is None else f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def design_rows(root: Path, args: dict[str, str], page: Path) -> list[dict]:
    """Per trial sweep under `dir=` (each subdirectory with runs/, a sweep of one design over seeds): the design
    (architecture, learning rate, batch, schedule steps, and the fields in which it differs from the nearest
    design of the main job's runs under `main=`), each seed's final test accuracy (its last evaluation), how
    many seeds learned (final test accuracy >= HIGH_ACC) and the training CPU minutes. Finished runs only."""
    where = root / args.get("dir", "")
    sweeps = sorted(p.parent for p in where.glob(f"*/{RUNS}")) if "dir" in args else []
    if not sweeps:
        raise PageError(f"{page}: generated block 'design {args_text(args)}': no sweep under dir=")
    main_runs = sorted((root / args["main"] / RUNS).iterdir()) if "main" in args else []
    main = list({str(d): d for d in (_design(RunDir(r).read_config()) for r in main_runs)}.values())
    rows = []
    for sweep in sweeps:
        runs = [RunDir(r) for r in sorted((sweep / RUNS).iterdir()) if RunDir(r).finished]
        configs = [r.read_config() for r in runs]
        finals = {c.seed: [m for m in store_runs.metrics(r.path) if "eval" in m][-1]["eval"]["test"]["acc"] for r, c in zip(runs, configs)}
        cpu = sum(store_runs.summary(r.path)["cpu_time_s"] for r in runs) / 60
        designs = {str(d): d for d in map(_design, configs)}
        if len(designs) != 1:
            raise PageError(f"{page}: generated block 'design {args_text(args)}': {sweep} mixes {len(designs)} designs")
        [design] = designs.values()
        c = configs[0]
        rows.append({"trial": md_code(str(sweep.relative_to(root))), "architecture": c.model.preset,
                     "lr": f"{c.optim.lr:g}", "batch": c.batch_size, "schedule (steps)": f"{c.steps:,}",
                     **({"differs from the main job in": _differences(design, main)} if "main" in args else {}),
                     "final test accuracy by seed": ", ".join(f"{s}: {a:.2f}" for s, a in sorted(finals.items())),
                     "learned": f"{sum(a >= HIGH_ACC for a in finals.values())} of {len(finals)}",
                     "CPU min": f"{cpu:.1f}"})
    return rows


def prompt_rows(root: Path) -> list[dict]:
    """Per scale and task (ATR: grammar) of the runs read on prompts unseen in training (verdict.json `prompts`):
    the studies and runs, the share of test prompts seen in training (range over runs), and the mean accuracy
    on all prompts and on the unseen ones."""
    parts = []
    for study in studies(root):
        df = runs_table(str(root / study))
        if "seen_share" in df and df["seen_share"].notna().any():
            read = df[df["seen_share"].notna()]
            grammar = read.get("task.params.grammar", pd.Series(None, index=read.index, dtype=object))
            grammar = grammar.astype(object).fillna("easy")
            task = read["task.name"].astype(str) + (" (" + grammar + ")").where(read["task.name"] == "atr", "")
            parts.append(read.assign(scale=study.parent.name, task=task, study=study.name))
    if not parts:
        return []
    rows = []
    for (scale, task), g in pd.concat(parts, ignore_index=True).groupby(["scale", "task"], sort=True):
        share = g["seen_share"].astype(float)
        rows.append({"scale": scale, "task": task, "studies": g["study"].nunique(), "runs read": len(g),
                     "test prompts seen in training": num(share.min()) if num(share.min()) == num(share.max())
                     else f"{num(share.min())}–{num(share.max())}",
                     "acc, all prompts": num(g["acc_all_prompts"].astype(float).mean()),
                     "acc, unseen prompts": num(g["acc_all"].astype(float).mean())})
    return rows


def pointer_rows(root: Path) -> list[dict]:
    """Every committed learned run whose query side carries part of the effect (@query's interval above LOW) and
    that has a pointer control (`interventions.pointer`): its verdict, @query, and the shares of patched outputs
    that follow the answer and the value's old position, with their intervals."""
    from mecheval.interventions.pointer import POINTER, POINTER_COLUMNS
    from mecheval.interventions.verdict import LOW

    rows = []
    for study in studies(root):
        df = runs_table(str(root / study))
        if "attrib@query_lo" not in df:
            continue
        for _, r in df[df["attrib@query_lo"].astype(float) > LOW].iterrows():
            path = Path(r["run_dir"]) / POINTER
            if r["verdict"] == "not learned" or not path.exists():
                continue
            p = store_runs.table(path, POINTER_COLUMNS).iloc[0]
            rows.append({"study": md_text(f"{study.parent.name}/{study.name}"), "architecture": md_text(r["arch"]),
                         "seed": num(r.get("seed"), 0), "verdict": r["verdict"], "@query": interval(r, "attrib@query"),
                         "follows the answer": interval(p, "answer"), "follows the old position": interval(p, "position"),
                         "n": int(p["n"])})
    return rows


def draw_rates(table: pd.DataFrame, path: Path) -> None:
    """`rates.rate_figure` of `rates_data` (read back from its CSV) as an optimised PNG at `path`."""
    from pages.study_figure import save_figure

    save_figure(rate_figure(table.fillna({"grammar": ""})), path)
