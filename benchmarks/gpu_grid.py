"""The published AR grid as cohorts (issue 54 item 6), in three stages that `gpu_grid.sh` runs under its time budget:

  train GRID   the zoo at the published widths, rates and seeds, `--scale paper --cohort auto --early-stop`
               (`study.run_study`, resumed where GRID holds runs); stopped by SIGINT, its runs checkpoint;
  read GRID    the readouts and report of the runs finished so far (`run_study(train=False)`), nothing trained;
  pack GRID OUT  every finished run's tables and verdict inputs (config, summary, metrics.jsonl.gz, verdict.json,
               run.json, parquet tables; the study's runs.parquet, study.json, report.md, figures) and the weights
               of its cell's best-rate runs (`best_lr`, so far), as OUT/grid.tgz.part-* (15 MiB each);
               checkpoints, snapshots and other weights stay behind; OUT/grid-manifest.txt lists what came.

`--rehearse` shrinks every run (50 steps, a pool of 512 examples, 64 examples per evaluation and readout) to
rehearse the stages on a CPU. train and read take the same grid options, so that they name the same runs.

    python benchmarks/gpu_grid.py train GRID [--archs ...] [--widths ...] [--lrs ...] [--seeds ...] [--rehearse]
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

from mecheval.common import N_EXAMPLES
from mecheval.report.results import study_table
from mecheval.study import STUDIES, run_study
from mecheval.study.presets import AR_STEPS, PAPER_LRS, ZOO
from mecheval.sweeps.cohorts import parse_cohort
from mecheval.sweeps.runner import SweepInterrupted
from mecheval.training.run_dir import CHECKPOINT, MODEL, SNAPSHOTS, RunDir

STUDY = "ar-architectures"
WIDTHS = [16, 32, 64, 128]
LRS = [*PAPER_LRS, 1e-2, 3e-2]  # the study's grid with the 1e-2 and 3e-2 of some of its sweeps (docs/published.md)
SEEDS = [0, 1, 2]
REHEARSAL = {"steps": 50, "base": {"train_size": 512, "eval.size": 64, "eval.every": 25, "checkpoint_every": 25}, "n": 64}
PART_MB, MAX_PARTS = 15, 4  # the device tool brings back at most 8 files of 16 MiB, 64 MiB in all
# optimiser state, weights over training, a run's heatmaps (drawn again from its interventions.parquet by `mecheval
# intervene`; ~0.3 MiB a run) and the report's HTML (its figures embedded) stay on the machine
LEFT_BEHIND = {CHECKPOINT, SNAPSHOTS, "interventions", "worker.json", ".lock", "report.html"}


def numbers(kind: type):
    """An argparse type: "1e-3,3e-3" -> [0.001, 0.003]."""
    return lambda text: [kind(v) for v in text.split(",")]


def grid_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("grid", type=Path, help="the study directory (resumed where it exists)")
    parser.add_argument("--archs", type=lambda t: t.split(","), default=ZOO)
    parser.add_argument("--widths", type=numbers(int), default=WIDTHS)
    parser.add_argument("--lrs", type=numbers(float), default=LRS)
    parser.add_argument("--seeds", type=numbers(int), default=SEEDS)
    parser.add_argument("--cohort", default="auto", help="cohort size K, or auto")
    parser.add_argument("--workers", type=int, default=None, help="local workers (default: the core count)")
    parser.add_argument("--rehearse", action="store_true", help=f"tiny runs ({REHEARSAL['steps']} steps) for a CPU rehearsal")


def grid_study(args: argparse.Namespace, train: bool) -> None:
    """Trains (train) or reads the grid of `args` in `args.grid`."""
    study = STUDIES[STUDY]
    n = N_EXAMPLES
    if args.rehearse:
        study = replace(study, steps=(REHEARSAL["steps"], AR_STEPS[1]), base={**study.base, **REHEARSAL["base"]})
        n = REHEARSAL["n"]
    run_study(study, args.grid, "paper", workers=args.workers, n_examples=n, quiet=True, cohort=parse_cohort(args.cohort),
              train=train, widths=args.widths, lrs=args.lrs, seeds=args.seeds, archs=args.archs, early_stop=True)


def weights_to_bring(grid: Path, budget: float) -> tuple[set[Path], int, int]:
    """The weights of the best-rate runs finished so far, smallest widths first, within `budget` bytes:
    (their files, their bytes, how many best-rate runs there are)."""
    table = study_table(grid)
    best = table[table["best_lr"]].sort_values(["model.d_model", "arch", "seed"], kind="stable")
    files = [Path(d) / MODEL for d in best["run_dir"]]
    chosen, size = set(), 0
    for f in files:
        if f.exists() and size + f.stat().st_size <= budget:
            chosen.add(f)
            size += f.stat().st_size
    return chosen, size, len(files)


def archive(grid: Path, weights: set[Path]) -> bytes:
    """GRID as a gzipped tar: all but LEFT_BEHIND, unfinished runs and weights not in `weights`."""
    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        path = grid.parent / info.name
        parts = set(Path(info.name).parts)
        if parts & LEFT_BEHIND or ".tmp-" in info.name:
            return None
        if path.name == MODEL and path not in weights:
            return None
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        tar.add(grid, arcname=grid.name, filter=keep)
    return buffer.getvalue()


def pack(grid: Path, out: Path, weights_mb: float) -> None:
    """The finished runs of `grid` into `out` (see the module), the weights budget halved until the archive fits."""
    runs = sorted(p for p in (grid / "runs").iterdir() if p.is_dir()) if (grid / "runs").exists() else []
    finished = [RunDir(p) for p in runs if RunDir(p).finished]
    for run in finished:
        run.archive_metrics()
    budget = weights_mb * 2**20
    while True:
        weights, size, n_best = weights_to_bring(grid, budget) if finished else (set(), 0, 0)
        data = archive(grid, weights)
        if len(data) <= PART_MB * MAX_PARTS * 2**20 or not weights:
            break
        budget /= 2
    step = PART_MB * 2**20
    for i in range(0, len(data), step):
        (out / f"grid.tgz.part-{i // step:02d}").write_bytes(data[i:i + step])
    verdicts = sum((r.path / "verdict.json").exists() for r in finished)
    manifest = [f"grid {grid}: {len(runs)} runs started, {len(finished)} finished, {verdicts} with a verdict",
                f"weights: {len(weights)} of {n_best} best-rate runs so far, {size / 2**20:.1f} MiB",
                f"archive: {len(data) / 2**20:.1f} MiB in {-(-len(data) // step)} parts "
                f"(cat grid.tgz.part-* | tar xzf -)", *sorted(str(w.relative_to(grid)) for w in weights)]
    if len(data) > PART_MB * MAX_PARTS * 2**20:
        manifest.insert(3, f"WARNING: over the {PART_MB * MAX_PARTS} MiB that the device tool brings back with the "
                           "logs (8 files, 64 MiB): not every part comes back")
    (out / "grid-manifest.txt").write_text("\n".join(manifest) + "\n")
    print("\n".join(manifest[:3]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    stages = parser.add_subparsers(dest="stage", required=True)
    for stage in ("train", "read"):
        grid_options(stages.add_parser(stage))
    packing = stages.add_parser("pack")
    packing.add_argument("grid", type=Path, help="the study directory")
    packing.add_argument("out", type=Path, help="where the archive parts and manifest go ($OUT)")
    packing.add_argument("--weights-mb", type=float, default=40.0, help="the most MiB of best-rate weights")
    if len(sys.argv) == 1:  # `make bench` runs every benchmark bare: this one needs a stage and a grid
        parser.print_help()
        return
    args = parser.parse_args()
    if args.stage == "pack":
        pack(args.grid, args.out, args.weights_mb)
        return
    try:
        grid_study(args, train=args.stage == "train")
    except (KeyboardInterrupt, SweepInterrupted):  # the time limit: what is written stays, the next call resumes
        sys.exit(f"{args.stage}: stopped at its time limit")


if __name__ == "__main__":
    main()
