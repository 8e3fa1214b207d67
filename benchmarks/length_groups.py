"""Training steps/s on ATR with batches run in length groups (`length_groups`) against the padded batch,
side by side in one run, per mixer, as ratios (the issue "pay for tokens, not padding").

The published ATR training step: 2 layers, d = 64, batch 32, the trainer's step (`TrainStream.batch` +
`Trainer.train_step`) on the easy and medium grammars, and on the published AR (one length: it must not be
slower). Every cell's trainer reads the same batches in the same order (steps 0, 1, …), timed round-robin
(`paper_scale.measure`): a rate is the median over rounds of steps per CPU second, one thread.

    python benchmarks/length_groups.py [--rounds 5] [--steps 8] [--groups 1 --groups 4] [--mixers mamba]
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
import typer

from mecheval.study.presets import AR_PAPER, ZOO
from mecheval.training import validate_config
from mecheval.training.run_dir import RunDir
from mecheval.training.trainer import Trainer
from paper_scale import Cell, measure

POOL = 2048  # a fixed training pool, as the published runs read (sampling fresh ATR batches costs more than a step)
TASKS = {"atr easy": {"name": "atr", "params": {"grammar": "easy"}},
         "atr medium": {"name": "atr", "params": {"grammar": "medium"}}, "ar": AR_PAPER}


def trainer_step(task: dict, preset: str, groups: int, tmp: Path):
    """The loop body of `Trainer.fit` without its logging, on batches of the published size from a fixed pool."""
    cfg = validate_config({"task": task, "model": {"preset": preset, "d_model": 64}, "steps": 100_000, "batch_size": 32, "train_size": POOL,
                           "length_groups": groups, "device": "cpu", "eval": {"size": 8}})
    torch.manual_seed(0)
    trainer = Trainer(cfg, RunDir(tmp / f"{preset}-{groups}-{task['params'].get('grammar', 'ar')}"), quiet=True)

    def step() -> None:
        batch = trainer.stream.batch(trainer.step)
        trainer.train_step(batch)

    return step


def main(
    mixers: list[str] = typer.Option(ZOO, "--mixers"),
    groups: list[int] = typer.Option([1, 2, 4, 8], "--groups", help="length_groups values; the first is the reference"),
    tasks: list[str] = typer.Option(list(TASKS), "--tasks"),
    rounds: int = typer.Option(5),
    steps: int = typer.Option(8, help="steps per cell per round"),
) -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        cells = {(t, m, g): Cell(trainer_step(TASKS[t], m, g, Path(tmp))) for t in tasks for m in mixers for g in groups}
        measure(list(cells.values()), rounds, steps)
    print(f"\n## trainer steps per CPU second, 1 thread, d = 64, batch 32; median of {rounds} rounds of {steps} steps; "
          f"ratio to length_groups = {groups[0]}")
    head = " ".join(f"{f'g={g}':>14}" for g in groups)
    print(f"{'task':<11} {'mixer':<10} {head}")
    for t in tasks:
        for m in mixers:
            ref = cells[(t, m, groups[0])].rate()
            row = " ".join(f"{cells[(t, m, g)].rate():6.1f} ({cells[(t, m, g)].rate() / ref:4.2f}x)" for g in groups)
            print(f"{t:<11} {m:<10} {row}")


if __name__ == "__main__":
    typer.run(main)
