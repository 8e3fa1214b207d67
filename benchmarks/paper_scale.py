"""Steps/s of every mixer at the published AR scale, side by side in one run (issue 12's table).

The published AR (16 pairs over 4096 + 4096 tokens, T = 37), 2 layers, d = 64, batch 32, the head at
the answer only. A *bare step* (`training.threads.bare_step`) is forward, cross-entropy at the answer,
backward and AdamW on a fixed batch, no trainer. Every cell is timed round-robin: each round times a block of steps of every cell in
turn, and a cell's rate is its median over rounds, so a busy machine slows all cells alike and the
ratios of one run hold even where the absolute numbers do not.

Each timed block follows one untimed step of the same cell: without it the first cell after the pause
ran on cold caches (measured: attention's fused cell at 44.7 steps/s beside its reference cell, the same
code, at 60.0). Rates also move by about ±5% from one process to the next (attention alone: 58.6 to
64.8 in four runs), more than within one run, so compare ratios of one run, and runs with each other.

One-thread rates are steps per second of the process's CPU time (what a core of its own would give:
other processes' load does not count, their contention for caches and memory does); the threads table
compares wall-clock rates, since a second thread only pays off in wall time. Tables:

  1. one thread: steps/s with the fused CPU kernels (the default), ratio to attention, the time for the
     published 50,016 steps, steps/s with the pure-PyTorch reference ops (`MECHEVAL_KERNELS=reference`),
     and fused / reference;
  2. threads: bare steps/s with 1 and 2 torch threads, and what `fastest_threads` picks from them;
  3. the trainer's step (`TrainStream.batch` + `Trainer.train_step`, the loop body of `fit` without its
     logging) against the bare step, one thread (goal: within 10%).

    python benchmarks/paper_scale.py [--rounds 5] [--steps 4] [--mixers h3 --mixers mamba]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
import typer

from mecheval.models import ARCHITECTURES
from mecheval.models.ops.dispatch import kernel_mode
from mecheval.study.presets import AR_PAPER, AR_STEPS, PAPER_TRAIN_SIZE
from mecheval.training import validate_config
from mecheval.training.run_dir import RunDir
from mecheval.training.threads import bare_step, fastest
from mecheval.training.trainer import Trainer

D_MODEL, N_LAYERS, BATCH = 64, 2, 32
PAPER_STEPS = AR_STEPS[0]  # 50,016
SETTLE_S = 0.5  # pause before each round (idle threads stop spinning)


def paper_config(preset: str, d_model: int = D_MODEL, device: str = "cpu") -> dict:
    """One run of `mecheval study ar-architectures --scale paper --widths D` (log and eval once)."""
    return {"task": AR_PAPER, "model": {"preset": preset, "d_model": d_model, "n_layers": N_LAYERS},
            "steps": PAPER_STEPS, "batch_size": BATCH, "train_size": PAPER_TRAIN_SIZE, "device": device,
            "log_every": PAPER_STEPS, "checkpoint_every": PAPER_STEPS, "eval": {"every": PAPER_STEPS, "size": 32}}


def trainer_step(preset: str, tmp: Path, d_model: int = D_MODEL, device: str = "cpu") -> Callable[[], None]:
    """The body of `Trainer.fit`'s loop without its logging: the stream's batch, then `train_step`."""
    trainer = Trainer(validate_config(paper_config(preset, d_model, device)), RunDir(tmp / f"{preset}-{d_model}"), quiet=True)

    def step() -> None:
        batch = trainer.stream.batch(trainer.step)
        trainer.tokens += int(batch.lengths.sum())
        trainer.train_step(batch)

    return step


class Cell:
    """A step function timed under a thread count and a kernel mode: per-round seconds per step, by the
    wall clock and by this process's CPU time (all its threads)."""

    def __init__(self, step: Callable[[], None], threads: int = 1, mode: str | None = None) -> None:
        self.step, self.threads, self.mode = step, threads, mode
        self.times: dict[str, list[float]] = {"wall": [], "cpu": []}

    def run(self, n: int) -> tuple[float, float]:
        torch.set_num_threads(self.threads)
        with kernel_mode(self.mode) if self.mode else nullcontext():
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(n):
                self.step()
            return (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n

    def time(self, n: int) -> None:
        """One untimed step (the cell's caches and pages warm again after the other cells ran), then `n`
        timed steps."""
        self.run(1)
        wall, cpu = self.run(n)
        self.times["wall"].append(wall)
        self.times["cpu"].append(cpu)

    def rate(self, clock: str = "cpu") -> float:
        """Steps per second of `clock` ("cpu" or "wall"): the median over rounds."""
        return 1 / statistics.median(self.times[clock])


def measure(cells: list[Cell], rounds: int, steps: int) -> None:
    """One untimed warm-up block per cell (numba compiles, caches fill), then `rounds` round-robin blocks.
    One-thread cells go first in each round, after a pause: a pool's idle threads spin for a while after
    a multi-threaded call, and their CPU time would count against the next cell."""
    cells = sorted(cells, key=lambda c: c.threads)
    for cell in cells:
        cell.run(1)
    for r in range(rounds):
        time.sleep(SETTLE_S)
        for cell in cells:
            cell.time(steps)
        print(f"round {r + 1}/{rounds} done", flush=True)


def hms(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def main(
    mixers: list[str] = typer.Option(list(ARCHITECTURES), "--mixers", help="presets of ARCHITECTURES"),
    rounds: int = typer.Option(5, help="timed round-robin rounds (median)"),
    steps: int = typer.Option(4, help="steps per cell per round"),
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cells = {}
        for preset in mixers:
            torch.manual_seed(0)
            step = bare_step(validate_config(paper_config(preset)))
            cells[preset] = {"fused": Cell(step), "reference": Cell(step, mode="reference"),
                             "2 threads": Cell(step, threads=2), "trainer": Cell(trainer_step(preset, Path(tmp)))}
        measure([c for row in cells.values() for c in row.values()], rounds, steps)
    torch.set_num_threads(1)
    attention = cells["attention"]["fused"] if "attention" in cells else None
    base = attention.rate() if attention else float("nan")
    print(f"\n## bare AdamW step, 1 thread (steps per CPU second): published AR (T=37), 2 layers, d={D_MODEL}, batch {BATCH}; "
          f"median of {rounds} round-robin rounds of {steps} steps; /attn range: lowest and highest of the rounds")
    print(f"{'mixer':<10} {'steps/s':>8} {'/attn':>6} {'/attn range':>12} {'50,016 steps':>13} {'reference':>10} {'fused/ref':>10}")
    for preset, row in cells.items():
        fused, ref = row["fused"].rate(), row["reference"].rate()
        per_round = [a / m for a, m in zip(attention.times["cpu"], row["fused"].times["cpu"])] if attention else [float("nan")]
        spread = f"{min(per_round):.2f}–{max(per_round):.2f}"
        print(f"{preset:<10} {fused:>8.1f} {fused / base:>6.2f} {spread:>12} {hms(PAPER_STEPS / fused):>13} {ref:>10.1f} {fused / ref:>10.2f}")
    print("\n## threads: bare step, wall-clock steps/s")
    print(f"{'mixer':<10} {'1 thread':>9} {'2 threads':>10} {'2/1':>6} {'picked':>7}")
    for preset, row in cells.items():
        one, two = row["fused"], row["2 threads"]
        picked = fastest({1: one.times["wall"], 2: two.times["wall"]})
        w1, w2 = one.rate("wall"), two.rate("wall")
        print(f"{preset:<10} {w1:>9.1f} {w2:>10.1f} {w2 / w1:>6.2f} {picked:>7}")
    print("\n## trainer step vs bare step, 1 thread (goal: within 10%)")
    print(f"{'mixer':<10} {'bare':>8} {'trainer':>8} {'cost':>7}")
    for preset, row in cells.items():
        bare, trainer = row["fused"].rate(), row["trainer"].rate()
        print(f"{preset:<10} {bare:>8.1f} {trainer:>8.1f} {bare / trainer - 1:>+7.1%}")


if __name__ == "__main__":
    typer.run(main)
