"""`run_study(preset, out)`: sweep -> interventions on every finished run -> report, resumable.

    OUT/sweep.yaml, OUT/runs/<name>/...   the sweep (see mecheval.sweeps)
    OUT/runs/<name>/interventions.parquet, verdict.json, interventions/*.png
    OUT/runs/<name>/splits/<split>/       the same readouts on the study's further splits (ATR's held-out pairs)
    OUT/runs/<name>/timeline.parquet      the readouts at every snapshot (snapshots/, not committed)
    OUT/runs.parquet                      every run, config fields and summary metrics: the data the report links
    OUT/study.json                        preset, scale, what the cpu scale drops, timings
    OUT/study.running.json                from a call's start to its end (`store.studies.running`): kept by a
                                          study stopped partway, whose finished runs can then be committed
    OUT/report.md, OUT/report.html        the report (mecheval.report)
Re-running skips finished runs, runs that already have their interventions and snapshots already read. A run
that diverged (`RunDir.diverged`) is a result: reported as such (study.json `diverged`), not trained again or read.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

from mecheval.errors import describe
from mecheval.interventions.accuracy import EXAMPLES
from mecheval.interventions.patching import N_EXAMPLES
from mecheval.interventions.runs import (has_valid_verdict, intervene_run, read_verdict_file, recheck_run, relabel_run,
                                         reread_terms, split_dir, task_chance, verdict_is_current, write_examples)
from mecheval.interventions.timeline import timeline
from mecheval.training.run_dir import RunDir, snapshot_steps
from mecheval.report import Report, build_report
from mecheval.store import studies
from mecheval.study.presets import STUDIES, TIMELINE_EXAMPLES, Study
from mecheval.study.progress import training_bars
from mecheval.sweeps import SweepConfig, collect, run_sweep
from mecheval.sweeps.spec import expand
from mecheval.sweeps.runner import RUNS
from mecheval.training.lock import DirLock
from mecheval.common import ConfigError, atomic_write_bytes, atomic_write_text, read_json_object, safe_unlink


def get_study(name: str) -> Study:
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; known: {sorted(STUDIES)}")
    return STUDIES[name]


def run_study(
    preset: str | Study,
    out: str | Path,
    scale: str = "cpu",
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    n_examples: int = N_EXAMPLES,
    quiet: bool = False,
    new: bool = False,
    cohort: int | str | None = None,
    train: bool = True,
    **axes,
) -> Report:
    """Runs (or resumes) the study `preset` (a name, or a Study) at `scale` in `out`; writes its report.

    axes: `widths`, `lrs`, `seeds`, `archs` restrict or replace the scale's sweep (`Study.sweep`).
    new: restart afresh the runs in `out` made with a different spec (else they are refused).
    cohort: train runs that differ only in seed, lr and weight decay as cohorts (`run_sweep`'s `cohort`).
    train: False trains nothing: the readouts and the report of the study's runs finished so far (a study
    stopped partway, read while it waits to be resumed).
    Only the study's own runs are intervened on and reported, whatever else `out` holds.
    """
    study = preset if isinstance(preset, Study) else get_study(preset)
    out = Path(out)
    sweep = SweepConfig.model_validate(study.sweep(scale, **axes))
    times: dict[str, float] = {}

    start = time.perf_counter()
    planned = {run.name: run.config.steps for run in expand(sweep)}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / studies.RUNNING, json.dumps({"preset": study.name, "scale": scale, "started": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n", out)
    if train:
        with training_bars(out, planned, quiet) as finished:
            outcomes = run_sweep(sweep, out, executor, workers, address, on_outcome=finished, new=new, cohort=cohort)
        failed = [o for o in outcomes if o.error and not RunDir(out / RUNS / o.name).diverged]
        if failed:
            raise RuntimeError("runs failed: " + "; ".join(f"{o.name}: {o.error}" for o in failed))
        names = [o.name for o in outcomes if not o.error]
    else:
        names = [name for name in planned if RunDir(out / RUNS / name).finished]
    diverged = [name for name in planned if RunDir(out / RUNS / name).diverged]  # results: reported, not read
    for name in diverged:
        tqdm.write(f"{name}: {RunDir(out / RUNS / name).read_divergence()['reason']} (reported as diverged)", file=sys.stderr)
    times["train_s"] = time.perf_counter() - start

    with DirLock(out, "study directory"):  # readouts written: no report reads the study meanwhile
        start = time.perf_counter()
        runs = sorted(out / RUNS / name for name in names)
        todo = []
        for split in ("test", *study.splits):  # the test split, then the study's further ones (ATR's held-out pairs)
            for run_dir in runs:
                out_dir = _readout_dir(run_dir, split)
                if not has_valid_verdict(out_dir):  # missing, or left empty or invalid: recomputed
                    todo.append((run_dir, split))
                elif (n := read_verdict_file(out_dir).get("n_all", n_examples)) != n_examples:  # an earlier call's --n
                    tqdm.write(f"reading {out_dir} again: read on {n} examples, this call asks for {n_examples}",
                               file=sys.stderr)
                    todo.append((run_dir, split))
                elif not verdict_is_current(out_dir):  # decided by earlier rules: decided anew, patched again where needed
                    if not recheck_run(out_dir, run_dir, study.readout(n_examples, split)):
                        todo.append((run_dir, split))
        unreadable = []
        for run_dir, split in tqdm(todo, desc="intervene", unit="run", disable=quiet):
            try:
                _intervene(run_dir, study, n_examples, split)
            except Exception as e:  # one bad run is reported and skipped; the report shows it without a verdict
                name = run_dir.name if split == "test" else f"{run_dir.name} ({split})"
                unreadable.append(name)
                tqdm.write(f"skipped interventions of {name}: {describe(e)}", file=sys.stderr)
        times["intervene_s"] = time.perf_counter() - start

        start = time.perf_counter()  # the readouts over training, where snapshots were kept (only new ones)
        for run_dir in tqdm([d for d in runs if snapshot_steps(d)], desc="timeline", unit="run", disable=quiet):
            try:
                timeline(run_dir, n=TIMELINE_EXAMPLES, corrupt=study.corrupt[0], min_effect=study.min_effect)
            except Exception as e:  # reported and skipped, as an intervention failure is
                tqdm.write(f"skipped the timeline of {run_dir.name}: {describe(e)}", file=sys.stderr)
        times["timeline_s"] = time.perf_counter() - start

        atomic_write_bytes(out / "runs.parquet", collect(out).to_parquet(index=False), out)
        try:  # an earlier call's timings; a study.json left unreadable is rewritten
            previous = studies.meta(out)
        except (OSError, ConfigError):
            previous = {}
        meta = {
            "preset": study.name, "scale": scale, "description": study.description,
            "cpu_drops": study.cpu_drops if scale == "cpu" else "", "findings": list(study.findings),
            "n_examples": n_examples, "runs": len(runs), "diverged": diverged, "not_intervened": unreadable, "archs": axes.get("archs"),
            # a resumed study adds this call's time to what earlier calls spent
            **{k: previous.get(k, 0.0) + v for k, v in times.items()},
        }
        meta["wall_time_s"] = meta["train_s"] + meta["intervene_s"] + meta.get("timeline_s", 0.0)
        atomic_write_text(out / studies.STUDY_JSON, json.dumps(meta, indent=2) + "\n", out)
        safe_unlink(out / studies.RUNNING, out)
    return build_report(out)


RECHECK_KEEPS = ("state",)  # analyses a recheck's re-patch leaves as they were (the state readout: minutes per ATR run)


def relabel_study(out: str | Path, repatch: bool = False, recheck: bool = False, keep: tuple[str, ...] = (),
                  terms: bool = False) -> Report:
    """Every intervened run of the study in `out` decided anew by the current verdict rules from its tables
    (`interventions.runs.relabel_run`, the study's `min_effect`), then its report rebuilt; nothing retrained
    or re-patched. repatch: instead run every intervened run's interventions again with the study's settings
    and the current code (tables, artefact control, full-window readout, verdict; the weights are loaded,
    nothing is trained; readouts over training are left as they are; the analyses in `keep` left as they were). recheck: the weights loaded for the
    controls the tables lack (`recheck_run`: the pointer control, which prompts were seen in training), the
    runs whose readouts read prompts seen in training patched again on unseen ones (their state readouts, which
    no verdict reads, kept: RECHECK_KEEPS). A run committed without its weights (one that did not learn) is decided
    anew from its tables either way, and says so. terms: instead the term analyses' tables only computed again
    on each run's own readout examples (`reread_terms`; seconds per run; no verdict reads them), the rest as it
    was. Runs intervened before
    per-example tables existed get their examples.parquet (`write_examples`: one forward pass on the study's examples)."""
    out = Path(out)
    meta = read_json_object(out / studies.STUDY_JSON, {"preset": str, "n_examples": int})
    study = get_study(meta["preset"])
    for run_dir in sorted((out / RUNS).iterdir()):
        weights = RunDir(run_dir).has_weights
        for split in ("test", *study.splits):
            readouts = _readout_dir(run_dir, split)
            if (readouts / "interventions.parquet").exists():
                if terms:
                    if weights and split == "test":  # the term analyses read the test split only (`Study.readout`)
                        reread_terms(run_dir, study.readout(meta["n_examples"], split))
                elif (repatch or recheck) and not weights:
                    tqdm.write(f"{run_dir.name}: decided from its tables (committed without its weights: `mecheval "
                               f"reproduce {run_dir} --restore` brings them back)", file=sys.stderr)
                    relabel_run(readouts, study.min_effect, task_chance(run_dir))
                elif repatch:
                    _intervene(run_dir, study, meta["n_examples"], split, skip=keep)
                elif recheck and not recheck_run(readouts, run_dir, study.readout(meta["n_examples"], split)):
                    _intervene(run_dir, study, meta["n_examples"], split, skip=RECHECK_KEEPS)
                elif not recheck:
                    relabel_run(readouts, study.min_effect, task_chance(run_dir))
        if (run_dir / "interventions.parquet").exists() and not (run_dir / EXAMPLES).exists() and weights:
            write_examples(run_dir, meta["n_examples"])
    return build_report(out)


def _readout_dir(run_dir: Path, split: str) -> Path:
    """Where a run's readouts on `split` lie: the run directory for the test split, else RUN/splits/<split>/."""
    return run_dir if split == "test" else split_dir(run_dir, split)


def _intervene(run_dir: Path, study: Study, n: int, split: str = "test", skip: tuple[str, ...] = ()) -> None:
    """The study's interventions on one run's `split` (`Study.readout`): the test split into the run directory, a
    further split into RUN/splits/<split>/. A study reads a run only where its readout is missing, stale or read
    on another --n: it replaces its own readout."""
    out = None if split == "test" else split_dir(run_dir, split)
    intervene_run(run_dir, study.readout(n, split, skip), out=out, replace=True)
