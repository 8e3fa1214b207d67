"""Training speed: steps/s and tokens/s per architecture, and a local sweep's parallel speed-up.

1. One 2-layer d=64 run per architecture preset on AR (published task: 16 pairs, 4096 + 4096
   tokens, batch 32), one torch thread; architectures whose mixer is not built yet are listed as such.
2. The same 6 runs as a local sweep on 2 worker processes, and on 1 (one after another); the ratio
   of the wall times (target >= 1.8 on 2 idle cores).

    python benchmarks/train.py [--steps 30] [--sweep-steps 2000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from mecheval.models import ARCHITECTURES
from mecheval.sweeps import SweepConfig, run_sweep
from mecheval.training import train, validate_config


def config(preset: str, steps: int, **task) -> dict:
    return {
        "task": {"name": "ar", "params": task},
        "model": {"preset": preset, "d_model": 64, "n_layers": 2},
        "steps": steps,
        "batch_size": 32,
        "log_every": steps,
        "checkpoint_every": steps,
        "eval": {"every": steps, "size": 32, "splits": ["test"]},
        "device": "cpu",
    }


def per_architecture(steps: int, tmp: Path) -> None:
    torch.set_num_threads(1)
    print(f"## {steps} steps, 2 layers, d=64, AR 16 pairs 4096+4096, batch 32, 1 thread")
    print(f"{'architecture':<12} {'steps/s':>9} {'tokens/s':>10}")
    for preset in ARCHITECTURES:
        cfg = validate_config(config(preset, steps, n_pairs=16, n_keys=4096, n_values=4096))
        try:
            s = train(cfg, tmp / f"arch-{preset}", quiet=True)
        except NotImplementedError as e:
            print(f"{preset:<12} not built yet ({e})")
            continue
        print(f"{preset:<12} {s['steps_per_s']:>9.1f} {s['tokens_per_s']:>10.0f}")


def sweep_speedup(steps: int, tmp: Path) -> None:
    base = config("attention", steps, n_pairs=8, n_keys=64, n_values=64)
    sweep = SweepConfig(base=base, grid={"seed": [0, 1, 2], "optim.lr": [1e-3, 3e-3]})
    times = {}
    for workers in (2, 1):
        start = time.perf_counter()
        outcomes = run_sweep(sweep, tmp / f"sweep-{workers}", "local", workers)
        times[workers] = time.perf_counter() - start
        assert all(o.error is None for o in outcomes), [o.error for o in outcomes]
    print(f"## 6-run local sweep (attention d=64, AR 8 pairs 64+64, {steps} steps each)")
    print(f"2 workers: {times[2]:.1f} s   1 worker (sequential): {times[1]:.1f} s   speed-up: {times[1] / times[2]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="steps per architecture")
    parser.add_argument("--sweep-steps", type=int, default=2000, help="steps per sweep run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        per_architecture(args.steps, Path(tmp))
        sweep_speedup(args.sweep_steps, Path(tmp))


if __name__ == "__main__":
    main()
