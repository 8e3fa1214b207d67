"""Reads runs trained on the published ATR-easy grammar on the published test documents themselves: the first 320
(the examples the published accuracy was read on: `docs/findings/atr.md`) and all 1,024, each with its Wilson 95%
interval: like for like with the published value, where the runs' own test accuracy reads fresh documents. A run of
the published generalisation language (`grammar_draw` "published-split*") is read on its dev set (`test`) and on its
held-out test set (`heldout`, where the published held-out accuracy was read).

    .venv/bin/python tools/atr/published_test.py results/paper-d64/atr-published-*/runs/*
"""

from __future__ import annotations

import sys

from mecheval import load_run
from mecheval.interventions.accuracy import accuracy
from mecheval.interventions.metrics import accuracy_interval

PUBLISHED_N = 320  # the published figure's examples (the first 320 test documents)


def main(run_dirs: list[str]) -> None:
    print("run | split | first 320 [95%] | all 1,024 [95%]")
    for run in run_dirs:
        lm, task, _ = load_run(run)
        for split in ("test", "heldout") if task.params.split_frac else ("test",):
            cells = []
            for n in (PUBLISHED_N, 1024):
                k, m = accuracy(lm, task.published_test_set(n, split))  # (correct, n)
                lo, hi = accuracy_interval(k, m)
                cells.append(f"{k / m:.3f} [{lo:.3f}, {hi:.3f}]")
            print(f"{run} | {split} | {' | '.join(cells)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
