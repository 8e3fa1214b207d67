"""Patched cells per second: mecheval's batched engine vs pyvene one configuration at a time.

Same model, batch and cells in one run: a 2-layer d=64 attention LM on AR as published (16 pairs,
4096 + 4096 tokens), every site × 4 role positions × N examples, corrupting the key. pyvene runs each
(site, position) with one IntervenableModel per site, as the published code does, over batches of
--pyvene-batch examples; it is timed with the head at every position (as published) and at the answer only (the
engine's head). Prints cells/s, the ratios, and the largest difference between the results. The
engine (all cells, 3 times) and pyvene (a third of the cells at a time) run in interleaved rounds.

    python benchmarks/interventions.py [--n 1024] [--run RUN_DIR] [--pyvene-batch 256] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from mecheval.interventions import Cell, patch_cells, resolve_sites
from mecheval.interventions.pyvene_ref import PyveneSite
from mecheval.models.lm import build_model
from mecheval.tasks import make_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024, help="examples")
    ap.add_argument("--run", help="a trained run directory (default: a freshly initialised model)")
    ap.add_argument("--pyvene-batch", type=int, default=256, help="examples per pyvene call (bounds memory)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.run:
        from mecheval import load_run

        lm, task, _ = load_run(args.run)
    else:
        task = make_task("ar")
        torch.manual_seed(0)
        lm = build_model(dict(vocab_size=task.vocab_size, d_model=64, n_layers=2, max_len=64)).eval()
    batch = task.sample(args.n, seed=0, split="test")
    corrupted = task.corrupt(batch, "key", 0).tokens
    roles = ["key", "value", "sep", "query"]
    cells = [Cell(s, p) for s in resolve_sites(lm, ["*"]) for p in roles]
    print(f"{len(cells)} cells ({len(cells) // len(roles)} sites × {len(roles)} positions) × {args.n} examples, "
          f"{lm.num_params():,} parameters, {torch.get_num_threads()} threads")

    def engine() -> torch.Tensor:
        return patch_cells(lm, corrupted, batch.tokens, cells, batch.roles, batch.answer, batch.answer_pos)["p_patched"]

    variants = {"pyvene, head at answer only": False, "pyvene, head everywhere (as published)": True}
    models = {(site, full): PyveneSite(lm, site, full_head=full) for site in {c.site for c in cells} for full in (False, True)}

    def pyvene(i: int, full: bool) -> torch.Tensor:  # cell i, in batches of --pyvene-batch examples
        c, out = cells[i], []
        for lo in range(0, args.n, args.pyvene_batch):
            sl = slice(lo, lo + args.pyvene_batch)
            out.append(models[c.site, full](corrupted[sl], batch.tokens[sl], batch.roles[c.position][sl],
                                            batch.answer[sl], batch.answer_pos[sl])[0])
        return torch.cat(out)

    # Interleaved rounds, so that a shared machine's changing load weighs on both sides alike: each
    # round runs the engine on all cells and pyvene on a third of them.
    rounds = 3
    t_ours, t_pv = 0.0, dict.fromkeys(variants, 0.0)
    results = {name: torch.empty(len(cells), args.n) for name in variants}
    for r in range(rounds):
        t0 = time.perf_counter()
        ours = engine()
        t_ours += (time.perf_counter() - t0) / rounds
        for name, full in variants.items():
            t0 = time.perf_counter()
            for i in range(r, len(cells), rounds):
                results[name][i] = pyvene(i, full)
            t_pv[name] += time.perf_counter() - t0
    print(f"{'mecheval engine:':40s}{len(cells) / t_ours:8.1f} cells/s  ({t_ours:.2f} s, mean of {rounds})")
    for name in variants:
        print(f"{name + ':':40s}{len(cells) / t_pv[name]:8.1f} cells/s  ({t_pv[name]:.2f} s)  "
              f"ratio {t_pv[name] / t_ours:5.1f}x  max |Δp| {float((results[name] - ours).abs().max()):.1e}")


if __name__ == "__main__":
    main()
