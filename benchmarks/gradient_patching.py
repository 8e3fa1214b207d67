"""Attribution patching vs exact patching: cells per second, and how well the estimate agrees.

1. Speed, side by side in one run: every site (residual and inside the mixers) × every position of a
   2-layer d = 64 model on AR with 4 pairs (the CPU task) and 16 (the published count) over 64 + 64, N examples, key corrupted; the exact
   engine (`patch_cells`) and the estimate (`gradient_cells`) in interleaved rounds. Prints cells/s and
   the ratio, for every mixer.
   The estimate runs with its default corrections (gradient), with the opt-in `mixer` too (+mixer) and
   without any (plain).
2. Agreement on trained runs (default: seed 0 of every architecture committed under results/cpu), and on
   mid-training snapshots (the issue's new-user setting for every mixer, `tiny`, trained once into
   --snapshot-dir, read at the steps --snapshot-steps):
   attribution per (site, role) cell by exact patching and by the estimate with each correction (none,
   answer, attention, tail, mixer, all: the default, all,mixer), on the examples outside the conv reach, and per (resid_pre / mixer_out, every
   position) cell; Spearman's rank correlation, the largest absolute error, the cells off by more than
   0.2, the worst cell, the recall of the exact top 5 by the estimate's top 5, and how many of the cells
   off by more than 0.2 have an error budget above 0.1 (`error_budget`, flagged) among how many flagged.

    python benchmarks/gradient_patching.py [--parts speed agreement snapshots] [--n 256] [--mixers attention ...]
        [--pairs 4 16] [--runs RUN_DIR ...] [--tiny-steps 1200] [--snapshot-steps 400] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from functools import partial
from pathlib import Path

import pandas as pd
import torch
from scipy import stats

from common import seconds
from mecheval.interventions import Cell, patch_cells, resolve_sites
from mecheval.interventions.patching import interchange_at
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
    "results/cpu/ar-architectures/runs/preset-baseconv_lr-0.003_seed-0",  # never learned AR: its attributions are noise
]
SITES = ["resid_pre", "conv_out", "state", "core_out", "mixer_out", "resid_post"]
ERROR = 0.2  # a cell whose estimate is off by more than this is listed as wrong
FLAG = 0.1  # an error budget above this flags the cell's estimate as unreliable
CORRECTIONS = ["none", "answer", "attention", "tail", "mixer", "all", "all,mixer"]  # the estimates compared: plain,
# each correction alone, all (the default: answer, attention, tail), and with the opt-in `mixer` too


def speed(n: int, mixer: str, pairs: int, rounds: int = 3) -> dict:
    """Exact and gradient patching of every site × every position, in `rounds` interleaved rounds
    (exact, the estimate with the default corrections, with `mixer` too and plain, a plain forward), medians:
    one row of the speed table."""
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

    timed = {"exact": lambda: patch_cells(*args), "gradient": lambda: gradient_cells(*args),
             "+mixer": lambda: gradient_cells(*args, correction="all,mixer"),
             "plain": lambda: gradient_cells(*args, correction="none"), "forward": forward}
    for fn in timed.values():  # warm-up
        fn()
    times = {k: [] for k in timed}
    for _ in range(rounds):
        for k, fn in timed.items():
            times[k].append(seconds(fn))
    exact_s, grad_s, mixer_s, plain_s, forward_s = (statistics.median(times[k]) for k in timed)
    return {"mixer": mixer, "pairs": pairs, "cells": len(cells), "sites": len(cells) // T, "T": T, "n": n,
            "exact s": exact_s, "gradient s": grad_s, "exact (forwards)": exact_s / forward_s,
            "gradient (forwards)": grad_s / forward_s, "+mixer (forwards)": mixer_s / forward_s,
            "plain (forwards)": plain_s / forward_s, "exact / gradient": exact_s / grad_s,
            "exact / +mixer": exact_s / mixer_s, "exact / plain": exact_s / plain_s}


def tiny(mixer: str, steps: int, cache: Path, keep: tuple[int, ...] = (200, 400, 600)) -> Path:
    """The issue's new-user setting: AR with 3 pairs over 16 + 16 tokens, 2 layers, d = 32, batch 64, lr 3e-3,
    seed 0, trained for `steps` steps with snapshots (and an evaluation) at the steps `keep`, in
    cache/tiny-<steps>/<mixer>; trained once (about 1-2 minutes of one core each), then read back."""
    from mecheval.training import train, validate_config

    out = cache / f"tiny-{steps}" / mixer
    if not (out / "summary.json").exists():
        train(validate_config({
            "task": {"name": "ar", "params": {"n_pairs": 3, "n_keys": 16, "n_values": 16}},
            "model": {"preset": mixer, "d_model": 32, "n_layers": 2}, "steps": steps, "batch_size": 64,
            "optim": {"lr": 3e-3}, "log_every": steps, "checkpoint_every": steps, "seed": 0, "device": "cpu",
            "eval": {"every": math.gcd(steps, *keep), "size": 256, "splits": ["test"]}, "snapshots": {"steps": keep},
        }), out, quiet=True)
    return out


def _load(run: Path, step: int | None):
    """(lm, task, test accuracy) of a run, at its snapshot `step` (None: its final weights)."""
    from mecheval import load_run
    from mecheval.training.run_dir import load_snapshot

    lm, task, _ = load_run(run)
    if step is None:
        return lm, task, json.loads((run / "summary.json").read_text())["final"]["test"]["acc"]
    load_snapshot(lm, run, step)
    logs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return lm, task, next(r["eval"]["test"]["acc"] for r in logs if r.get("step") == step and "eval" in r)


def agreement(runs: list[tuple[Path | str, int | None]], n: int, every_position: bool = False, top: int = 5) -> pd.DataFrame:
    """Exact patching against the estimate with each correction, per (run directory, snapshot step or None
    for the final weights): one row per (run, correction); `every_position`: sites resid_pre and mixer_out
    at every position, else SITES × 4 roles."""
    rows = []
    for run, step in runs:
        run = ROOT / run
        if not run.exists():
            print(f"skipped {run}: not here")
            continue
        lm, task, acc = _load(run, step)
        batch = task.sample(n, seed=0, split="test")
        masks = subsets(lm, batch)
        sites = [s for s in SITES if any(name.endswith(s) for name in lm.sites())]
        if every_position:  # the residual stream and the mixers' outputs at every position, as the issue tried
            sites = ["resid_pre", "mixer_out"]
            where = {str(t): torch.full((n,), t) for t in range(batch.tokens.shape[1])}
            masks = {"all": torch.ones(n, dtype=torch.bool)}
        else:
            where = {r: batch.roles[r] for r in ["key", "value", "sep", "query"]}
        table = partial(interchange_at, lm, task, batch, "key", sites, where, subsets=masks, n_boot=10)
        subset = "outside" if masks.get("outside", torch.zeros(1)).any() else "all"
        exact = table()
        exact = exact[exact["subset"] == subset].reset_index(drop=True)
        for correction in CORRECTIONS:
            start = time.perf_counter()
            est = table(method="gradient", correction=correction)
            seconds = time.perf_counter() - start
            est = est[est["subset"] == subset].reset_index(drop=True)
            err = (est["attrib"] - exact["attrib"]).abs()
            worst = err.idxmax()
            budget = est["error_budget"]
            top_est, top_exact = (set(d["attrib"].nlargest(top).index) for d in (est, exact))
            rows.append({
                "run": run.name + ("" if step is None else f" @{step}"), "test acc": acc, "correction": correction, "cells": len(est), "n": int(est["n"].iloc[0]),
                "effect": exact["p_clean"].iloc[0] - exact["p_corrupt"].iloc[0],
                "spearman": stats.spearmanr(exact["attrib"], est["attrib"]).statistic, "max |error|": err.max(),
                f"off > {ERROR}": int((err > ERROR).sum()),
                "worst cell": f"L{est['layer'][worst]} {est['site'][worst]} @{est['position'][worst]}: "
                              f"exact {exact['attrib'][worst]:.2f}, estimate {est['attrib'][worst]:.2f}",
                f"recall@{top}": len(top_est & top_exact) / top,
                "off ones flagged": f"{int((budget[err > ERROR] > FLAG).sum())} of {int((err > ERROR).sum())}"
                if correction != "none" else "",
                "flagged": int((budget > FLAG).sum()) if correction != "none" else "",
                "s": seconds,
            })
    return pd.DataFrame(rows)


def before_after(table: pd.DataFrame, corrected: str = "all") -> pd.DataFrame:
    """One row per run: the plain estimate -> the corrected one (`correction=corrected`)."""
    rows = []
    for run, g in table.groupby("run", sort=False):
        before, after = g.set_index("correction").loc["none"], g.set_index("correction").loc[corrected]
        arrow = lambda k, f: f"{before[k]:{f}} → {after[k]:{f}}"  # noqa: E731
        rows.append({"run": run, "test acc": f"{after['test acc']:.2f}", "effect": f"{after['effect']:.3f}",
                     "cells": after["cells"], "n": after["n"], "Spearman": arrow("spearman", ".2f"),
                     "max error": arrow("max |error|", ".2f"), f"off > {ERROR}": arrow(f"off > {ERROR}", "d"),
                     "worst cell (corrected)": after["worst cell"], "recall@5": arrow("recall@5", ".1f"),
                     "off, flagged": after["off ones flagged"], "flagged": after["flagged"]})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="examples")
    ap.add_argument("--parts", nargs="*", default=["speed", "agreement", "snapshots"], help="what to measure")
    ap.add_argument("--mixers", nargs="*", default=sorted(MIXERS), help="the speed models' mixers (default: all)")
    ap.add_argument("--pairs", type=int, nargs="*", default=[4, 16], help="AR pairs of the speed runs (4: the CPU task; 16: as published)")
    ap.add_argument("--runs", nargs="*", default=DEFAULT_RUNS, help="trained run directories for the agreement table")
    ap.add_argument("--tiny-steps", type=int, default=1200, help="training steps of the tiny models (`tiny`, every mixer)")
    ap.add_argument("--snapshot-steps", type=int, nargs="*", default=[400], help="the tiny models' snapshots read (mid-training; kept: 200, 400, 600)")
    ap.add_argument("--snapshot-dir", type=Path, default=Path("/tmp/mecheval-gradient-snapshots"), help="where they are trained (once)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown (and the agreement as before → after)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    fmt = lambda v: f"{v:.3g}"  # noqa: E731

    def show(df: pd.DataFrame, digits: int = 3) -> str:
        return df.to_markdown(index=False, floatfmt=f".{digits}g") if args.markdown else df.to_string(index=False, float_format=fmt)

    if "speed" in args.parts:
        rows = [speed(args.n, m, p) for p in args.pairs for m in args.mixers]
        print(f"\nspeed: every site × every position of a 2-layer d = 64 model, key corrupted, {torch.get_num_threads()} threads "
              f"(forwards: the time in plain forward passes of the model on the batch; gradient: with the default corrections, "
              f"+mixer: with `mixer` too, plain: without):")
        print(show(pd.DataFrame(rows)), flush=True)
    runs = {"agreement": [(r, None) for r in args.runs]} if "agreement" in args.parts else {}
    if "snapshots" in args.parts:
        dirs = [tiny(m, args.tiny_steps, args.snapshot_dir) for m in args.mixers]
        runs["snapshots"] = [(d, s) for s in args.snapshot_steps for d in dirs]
    what = {"agreement": "the committed runs",
            "snapshots": f"AR 3 pairs over 16 + 16, d = 32, snapshots of {args.tiny_steps}-step runs (`tiny`)"}
    for part, dirs in runs.items():
        for every in (False, True):
            cells = "resid_pre, mixer_out × every position, all examples" if every else f"{', '.join(SITES)} × 4 roles, examples outside the conv reach"
            print(f"\n{part} ({what[part]}; key corrupted; {cells}):")
            table = agreement(dirs, args.n, every_position=every)
            print(show(table), flush=True)
            if args.markdown:
                for corrected in ("all", "all,mixer"):
                    print(f"\nbefore → after ({corrected}):\n" + show(before_after(table, corrected)), flush=True)


if __name__ == "__main__":
    main()
