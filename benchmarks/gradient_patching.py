"""Attribution patching vs exact patching: cells per second, and how well the estimate agrees.

1. Speed, side by side in one run: every site (residual and inside the mixers) × every position of a
   2-layer d = 64 model on AR with 4 pairs (the CPU task) and 16 (the published count) over 64 + 64, N examples, key corrupted; the exact
   engine (`patch_cells`) and the estimate (`gradient_cells`) in interleaved rounds. Prints cells/s and
   the ratio.
2. Agreement on trained runs (default: seed 0 of every architecture committed under results/cpu):
   attribution per (site, role) cell by both methods, on the examples outside the conv reach; Spearman's
   rank correlation, the largest absolute error and the cells off by more than 0.2 (the recurrent
   state sites included).

    python benchmarks/gradient_patching.py [--n 256] [--mixer attention] [--pairs 4 16] [--runs RUN_DIR ...] [--threads 1]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch
from scipy import stats

from common import median_seconds
from mecheval.interventions import Cell, interchange, patch_cells, resolve_sites
from mecheval.interventions.artefact import subsets
from mecheval.interventions.gradient import gradient_cells
from mecheval.models.lm import build_model
from mecheval.tasks import make_task

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = [
    "results/cpu/quick/runs/preset-attention_lr-0.003_seed-0",
    "results/cpu/quick/runs/preset-mamba_lr-0.003_seed-0",
    "results/cpu/ar-based-conv/runs/d_conv-4+0_preset-based_lr-0.003_seed-0",
    "results/cpu/ar-architectures/runs/preset-h3_lr-0.003_seed-0",
    "results/cpu/ar-architectures/runs/preset-hyena_lr-0.003_seed-0",
    "results/cpu/ar-architectures/runs/preset-deltanet_lr-0.003_seed-0",
]
SITES = ["resid_pre", "conv_out", "state", "core_out", "mixer_out", "resid_post"]
ERROR = 0.2  # a cell whose estimate is off by more than this is listed as wrong


def speed(n: int, mixer: str, pairs: int) -> None:
    task = make_task("ar", n_pairs=pairs, n_keys=64, n_values=64)
    torch.manual_seed(0)
    lm = build_model(dict(vocab_size=task.vocab_size, d_model=64, n_layers=2, max_len=64, mixer=mixer)).eval()
    batch = task.sample(n, seed=0, split="test")
    corrupted = task.corrupt(batch, "key", 0).tokens
    T = batch.tokens.shape[1]
    where = {str(t): torch.full((n,), t) for t in range(T)}
    cells = [Cell(s, p) for s in resolve_sites(lm, ["*"]) for p in where]
    args = (lm, corrupted, batch.tokens, cells, where, batch.answer, batch.answer_pos)
    exact_s = median_seconds(lambda: patch_cells(*args), repeats=3)
    grad_s = median_seconds(lambda: gradient_cells(*args), repeats=3)
    with torch.no_grad():
        forward_s = median_seconds(lambda: lm(batch.tokens), repeats=3)
    print(f"\n{mixer}, 2 layers, d 64, AR {pairs} pairs: {len(cells)} cells ({len(cells) // T} sites × {T} positions) × {n} examples, "
          f"{torch.get_num_threads()} threads")
    print(f"{'method':<12}{'s':>10}{'cells/s':>12}{'forwards':>10}")
    for name, s in (("exact", exact_s), ("gradient", grad_s)):
        print(f"{name:<12}{s:>10.3f}{len(cells) / s:>12.0f}{s / forward_s:>10.1f}")
    print(f"gradient / exact cells/s: {exact_s / grad_s:.1f}x (forwards: the time in forward passes of the model on the batch)")


def agreement(run_dirs: list[str], n: int) -> pd.DataFrame:
    from mecheval import load_run

    rows = []
    for run in run_dirs:
        if not (ROOT / run).exists():
            print(f"skipped {run}: not here")
            continue
        lm, task, _ = load_run(ROOT / run)
        batch = task.sample(n, seed=0, split="test")
        masks = subsets(lm, batch)
        sites = [s for s in SITES if any(name.endswith(s) for name in lm.sites())]
        tables = {m: interchange(lm, task, batch, "key", sites, ["key", "value", "sep", "query"], subsets=masks,
                                 method=m, n_boot=10) for m in ("exact", "gradient")}
        subset = "outside" if (tables["exact"]["subset"] == "outside").any() else "all"
        keys = ["layer", "site", "position"]
        both = tables["exact"][tables["exact"]["subset"] == subset].merge(
            tables["gradient"][tables["gradient"]["subset"] == subset], on=keys, suffixes=("_exact", "_grad"))
        err = (both["attrib_grad"] - both["attrib_exact"]).abs()
        worst = both.loc[err.idxmax()]
        state = both["site"] == "state"
        rows.append({"run": Path(run).name, "cells": len(both), "n": int(both["n_exact"].iloc[0]),
                     "spearman": stats.spearmanr(both["attrib_exact"], both["attrib_grad"]).statistic,
                     "max |error|": err.max(), f"cells off > {ERROR}": int((err > ERROR).sum()),
                     f"state cells off > {ERROR}": f"{int((err[state] > ERROR).sum())} of {int(state.sum())}",
                     "worst cell": f"L{worst['layer']} {worst['site']} @{worst['position']}: "
                                   f"exact {worst['attrib_exact']:.2f}, gradient {worst['attrib_grad']:.2f}"})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="examples")
    ap.add_argument("--mixer", default="attention", help="the speed model's mixer")
    ap.add_argument("--pairs", type=int, nargs="*", default=[4, 16], help="AR pairs of the speed runs (4: the CPU task; 16: as published)")
    ap.add_argument("--runs", nargs="*", default=DEFAULT_RUNS, help="trained run directories for the agreement table")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for pairs in args.pairs:
        speed(args.n, args.mixer, pairs)
    table = agreement(args.runs, args.n)
    if len(table):
        print(f"\nagreement on trained runs (key corrupted, sites {', '.join(SITES)} × 4 roles):")
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
