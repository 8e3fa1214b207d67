"""Writes the published ATR-easy grammar and the published train/test sets to an npz.

The grammar and the sets come from `mecheval.tasks.atr.published` (our own re-implementation of the published
generator's draw order on numpy's RandomState(42); reference only, no code copied). Training on them needs no
npz: `task.params.grammar_draw: published` (or `published-sets`). The npz is for reading them elsewhere
(`tools/atr/atr_offset.py --published`):

    .venv/bin/python tools/atr/atr_published.py --out /tmp/atr_published.npz

It holds the grammar as `mecheval.tasks.atr.pcfg.Grammar` arrays (`grammar_<field>`), both sets as token rows
right-padded with 0 (`<bos> t… <eos> q target <eos>`, token ids as ours: terminals from 3), and each document's
key-value distance (`train_kv`, `test_kv`).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mecheval.tasks.atr.published import N_TEST, N_TRAIN, published_documents, published_grammar
from mecheval.tasks.atr.task import ATRParams, ATRTask

GRAMMAR_FIELDS = ("depth_cap", "n_rules", "rule_cdf", "rhs_len", "rhs_sym", "rhs_is_t", "head_cdf", "head_flat")


def token_rows(forest, key) -> tuple[np.ndarray, np.ndarray]:
    """(the documents as token rows [n, longest], [n] key-value distances)."""
    batch = ATRTask(ATRParams(grammar_draw="published"))._batch(forest, key)
    kv = (batch.roles["value"] - batch.roles["key"]).numpy()
    return batch.tokens.numpy(), kv


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/atr_published.npz")
    ap.add_argument("--n-train", type=int, default=N_TRAIN)
    args = ap.parse_args()
    t0 = time.time()
    grammar, sets = published_grammar(), published_documents(args.n_train, N_TEST)
    rows = {split: token_rows(*sets[split]) for split in ("train", "test")}
    width = max(r.shape[1] for r, _ in rows.values())
    pad = lambda r: np.pad(r, ((0, 0), (0, width - r.shape[1])))  # noqa: E731
    np.savez_compressed(
        args.out, **{f"grammar_{k}": getattr(grammar, k) for k in GRAMMAR_FIELDS},
        train=pad(rows["train"][0]), test=pad(rows["test"][0]), train_kv=rows["train"][1], test_kv=rows["test"][1],
    )
    for split, (forest, _) in sets.items():
        ctx, kv = forest.length, rows[split][1]
        print(f"{split}: n={len(ctx)} context mean {ctx.mean():.2f} median {np.median(ctx):.0f} max {ctx.max()} | "
              f"full length mean {ctx.mean() + 5:.2f} | kv distance mean {kv.mean():.2f}")
    print(f"{time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
