"""Cohorts against solo runs: model-steps/s of K runs trained as one job (`training.cohort`) and of one run alone,
per architecture, at the published AR shape (`paper_scale.paper_config`: T = 37, d = 64, 2 layers, batch 32).

For each architecture and K, a solo run, the cohort (seeds 0 … K−1, learning rates cycling over the published 1e-3,
3e-3, 1e-2) and a second solo run train `--steps` steps each, one after another, so that the ratio holds where a
shared machine's rates move. On a CPU each solo run trains in a new process (after 2 untimed steps there), as a sweep
worker's would: in this one, the heap that a cohort leaves behind would spare it the page faults that a run pays
every step in a new process (glibc hands the freed top of its heap back to the OS and faults it in again). A rate is
steps over the training time the summaries record (evaluation and logging included, model building and finishing
not): on a CPU the training process's CPU seconds (a shared machine's other jobs stretch the wall clock, not these), on a
GPU wall seconds; the solo rate the two solo runs' steps over their times, a cohort's K · steps over the sum of its
members' times (the cohort's own). Ratio: the cohort's per-model rate over the solo rate (K separate runs one after
another train at the solo rate). The training set is a pool of `--pool` examples read in one order each epoch, as
published but smaller, so that K pools build fast. Each architecture first trains 2 untimed steps (the numba kernels
compile or load: a first solo run paid it in its CPU time). Device: cuda where torch sees one, else the CPU with one
thread.

    python benchmarks/cohort.py [--archs attention,mamba] [--ks 1,16,64] [--engines loop,vmap] [--steps 30]
"""

from __future__ import annotations

import argparse
import tempfile
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch
from paper_scale import paper_config

from mecheval.training import train, validate_config
from mecheval.training.cohort import train_cohort

LRS = (1e-3, 3e-3, 1e-2)


def run_config(preset: str, steps: int, pool: int, device: str, seed: int = 0, lr: float = LRS[0]):
    cfg = paper_config(preset, device=device)
    return validate_config({**cfg, "steps": steps, "log_every": steps, "checkpoint_every": steps, "train_size": pool,
                            "train_order": "replay", "eval": {"every": steps, "size": 32, "splits": ["test"]},
                            "seed": seed, "optim": {"lr": lr}})


def seconds(summary: dict) -> float:
    """The training time a summary records: CPU seconds on a CPU, wall seconds on a GPU."""
    return summary["wall_time_s"] if summary["device"].startswith("cuda") else summary["cpu_time_s"]


def train_run(preset: str, steps: int, pool: int, device: str, tmp: Path) -> dict:
    """One run's summary."""
    return train(run_config(preset, steps, pool, device), tmp, quiet=True)


def solo_run(preset: str, steps: int, pool: int, device: str, tmp: Path) -> dict:
    """One run's summary; on a CPU trained in a new process after 2 untimed steps there (the numba kernels load), on
    a GPU in this one (a new process would spend the GPU check's minutes starting CUDA)."""
    if device == "cuda":
        return train_run(preset, steps, pool, device, tmp)
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as child:
        return child.submit(_solo_in_new_process, preset, steps, pool, device, tmp).result()


def _solo_in_new_process(preset: str, steps: int, pool: int, device: str, tmp: Path) -> dict:
    if device == "cpu":
        torch.set_num_threads(1)
    train_run(preset, 2, pool, device, tmp / "warm")
    return train_run(preset, steps, pool, device, tmp / "run")


def rate(summaries: list[dict]) -> float:
    """Model-steps per second of runs: their steps over their times."""
    return sum(s["steps"] for s in summaries) / sum(seconds(s) for s in summaries)


def cohort_rate(preset: str, k: int, engine: str, steps: int, pool: int, device: str, tmp: Path) -> float:
    """K members' model-steps per second as one cohort (their steps over their times, the cohort's own)."""
    members = [(run_config(preset, steps, pool, device, seed, LRS[seed % len(LRS)]), tmp / f"member-{seed}") for seed in range(k)]
    results = train_cohort(members, engine=engine, quiet=True)
    failed = [r for r in results if not isinstance(r, dict)]
    if failed:
        raise RuntimeError(f"{preset} K={k} {engine}: {failed[0]}")
    return rate(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default="attention,mamba,deltanet,hyena", help="architecture presets, comma-separated")
    parser.add_argument("--ks", default="1,16,64", help="cohort sizes, comma-separated (256 too, where it fits)")
    parser.add_argument("--engines", default="loop,vmap", help="cohort engines, comma-separated")
    parser.add_argument("--steps", type=int, default=30, help="training steps of every run")
    parser.add_argument("--pool", type=int, default=2048, help="training examples per run")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(1)
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU, 1 thread, per CPU second"
    print(f"## model-steps/s, AR at d = 64 (T = 37, batch 32, 2 layers), {args.steps} steps per run, {where}, "
          f"torch {torch.__version__}")
    print("| architecture | K | engine | solo | cohort | cohort / solo, per model |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for preset in args.archs.split(","):
            train_run(preset, 2, args.pool, device, Path(tmp) / f"warm-{preset}")  # numba compiles (or loads) its kernels
            for k in (int(k) for k in args.ks.split(",")):
                for engine in args.engines.split(","):
                    n += 1
                    before = solo_run(preset, args.steps, args.pool, device, Path(tmp) / f"solo-{n}")
                    together = cohort_rate(preset, k, engine, args.steps, args.pool, device, Path(tmp) / f"cohort-{n}")
                    solo = rate([before, solo_run(preset, args.steps, args.pool, device, Path(tmp) / f"after-{n}")])
                    print(f"| {preset} | {k} | {engine} | {solo:.1f} | {together:.1f} | {together / solo:.2f} |", flush=True)


if __name__ == "__main__":
    main()
