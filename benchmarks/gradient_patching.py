"""Attribution patching vs exact patching: cells per second, and how well the estimate agrees.

1. Speed, side by side in one run: every site (residual and inside the mixers) × every position of a
   2-layer d = 64 model on AR with 4 pairs (the CPU task) and 16 (the published count) over 64 + 64, N examples, key corrupted; the exact
   engine (`patch_cells`) and the estimate (`gradient_cells`) in interleaved rounds. Prints cells/s and
   the ratio, for every mixer.
2. Agreement on trained runs (default: seed 0 of every architecture committed under results/cpu):
   attribution per (site, role) cell by both methods, on the examples outside the conv reach; Spearman's
   rank correlation, the largest absolute error and the cells off by more than 0.2 (the recurrent
   state sites included).

    python benchmarks/gradient_patching.py [--n 256] [--mixers attention mamba ...] [--pairs 4 16] [--runs RUN_DIR ...] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import pandas as pd
import torch
from scipy import stats

from common import seconds
from mecheval.interventions import Cell, interchange, patch_cells, resolve_sites
from mecheval.interventions.artefact import subsets
from mecheval.interventions.gradient import gradient_cells
from mecheval.models.lm import build_model
from mecheval.models.mixers import MIXERS
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


def speed(n: int, mixer: str, pairs: int, rounds: int = 3) -> dict:
    """Exact and gradient patching of every site × every position, in `rounds` interleaved rounds
    (exact, gradient, a plain forward), medians: one row of the speed table."""
    task = make_task("ar", n_pairs=pairs, n_keys=64, n_values=64)
    batch = task.sample(n, seed=0, split="test")
    torch.manual_seed(0)
    lm = build_model(dict(vocab_size=task.vocab_size, d_model=64, n_layers=2, max_len=max(64, batch.tokens.shape[1]),
                          mixer=mixer)).eval()
    corrupted = task.corrupt(batch, "key", 0).tokens
    T = batch.tokens.shape[1]
    where = {str(t): torch.full((n,), t) for t in range(T)}
    cells = [Cell(s, p) for s in resolve_sites(lm, ["*"]) for p in where]
    args = (lm, corrupted, batch.tokens, cells, where, batch.answer, batch.answer_pos)

    def forward():
        with torch.no_grad():
            lm(batch.tokens)

    timed = {"exact": lambda: patch_cells(*args), "gradient": lambda: gradient_cells(*args), "forward": forward}
    for fn in timed.values():  # warm-up
        fn()
    times = {k: [] for k in timed}
    for _ in range(rounds):
        for k, fn in timed.items():
            times[k].append(seconds(fn))
    exact_s, grad_s, forward_s = (statistics.median(times[k]) for k in timed)
    return {"mixer": mixer, "pairs": pairs, "cells": len(cells), "sites": len(cells) // T, "T": T, "n": n,
            "exact s": exact_s, "gradient s": grad_s, "exact cells/s": len(cells) / exact_s,
            "gradient cells/s": len(cells) / grad_s, "exact (forwards)": exact_s / forward_s,
            "gradient (forwards)": grad_s / forward_s, "gradient / exact": exact_s / grad_s}


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
    ap.add_argument("--mixers", nargs="*", default=sorted(MIXERS), help="the speed models' mixers (default: all)")
    ap.add_argument("--pairs", type=int, nargs="*", default=[4, 16], help="AR pairs of the speed runs (4: the CPU task; 16: as published)")
    ap.add_argument("--runs", nargs="*", default=DEFAULT_RUNS, help="trained run directories for the agreement table")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [speed(args.n, m, p) for p in args.pairs for m in args.mixers]
    if rows:
        print(f"\nspeed: every site × every position of a 2-layer d = 64 model, key corrupted, {torch.get_num_threads()} threads "
              f"(forwards: the time in plain forward passes of the model on the batch):")
        print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    table = agreement(args.runs, args.n)
    if len(table):
        print(f"\nagreement on trained runs (key corrupted, sites {', '.join(SITES)} × 4 roles):")
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
