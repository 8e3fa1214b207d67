"""Training steps/s on a GPU against one CPU core, alone and with several runs sharing the GPU (issue 32).

Every cell is the published AR bare step (`paper_scale.paper_config`: T = 37, 2 layers, batch 32,
forward, loss at the answer, backward, AdamW) of one mixer at one width, measured in this one run on
this one machine, so the ratios hold where the absolute rates do not:

  cpu       one thread, steps per CPU second (the median of round-robin blocks, `paper_scale.Cell`);
  cuda      one process on the GPU, wall-clock steps/s (synchronised at the end of each block);
  trainer   the same for the trainer's step (`paper_scale.trainer_step`: the stream's batch, moved to the
            GPU, then `Trainer.train_step`), and its ratio to the bare step: what the loop around the
            step costs, which a GPU shows where a CPU hides it;
  cuda x k  k processes on the GPU at once (as `mecheval sweep --workers k` with `device: auto`), each
            timing the same cell for a fixed wall time after a shared start: steps/s per run and in total.

Ratios are to the cell's one-thread CPU rate. The cell is launch-bound on a GPU at these sizes, so
the per-run rate barely moves with width while the CPU's falls.

    python benchmarks/device_throughput.py [--mixers attention --mixers mamba] [--widths 64 --widths 256]
                                           [--share 6] [--seconds 10] [--json out.json]
"""

from __future__ import annotations

import json
import multiprocessing as mp
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import typer
from paper_scale import Cell, measure, paper_config, trainer_step

from mecheval.training import validate_config
from mecheval.training.threads import bare_step


WARMUP = 3  # untimed steps before a cell is timed (kernels load, caches fill)


def paper_step(preset: str, d_model: int, device: str) -> Callable[[], None]:
    """The cell's bare step on `device`, from the same seed everywhere."""
    torch.manual_seed(0)
    return bare_step(validate_config(paper_config(preset, d_model)), torch.device(device))


def warmed(step: Callable[[], None]) -> Callable[[], None]:
    """`step` after WARMUP untimed calls, the GPU idle again."""
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    return step


def cuda_rate(step: Callable[[], None], rounds: int, steps: int) -> float:
    """One process: wall-clock steps/s of `step` on the GPU, the median over `rounds` blocks of `steps` steps."""
    warmed(step)
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / steps)
    return 1 / statistics.median(times)


def shared_worker(preset: str, d_model: int, seconds: float, barrier, results) -> None:
    """One of k processes: warm up, wait for the others, then count steps for `seconds` of wall time."""
    torch.set_num_threads(1)
    step = warmed(paper_step(preset, d_model, "cuda"))
    barrier.wait()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for _ in range(8):
            step()
        n += 8
    torch.cuda.synchronize()
    results.put(n / (time.perf_counter() - start))


def shared_rates(preset: str, d_model: int, k: int, seconds: float) -> list[float]:
    """Steps/s of each of `k` processes running the cell on the GPU at once."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(k), ctx.Queue()
    procs = [ctx.Process(target=shared_worker, args=(preset, d_model, seconds, barrier, results)) for _ in range(k)]
    for p in procs:
        p.start()
    rates = [results.get() for _ in procs]
    for p in procs:
        p.join()
    return rates


def main(
    mixers: list[str] = typer.Option(["attention", "deltanet", "mamba"], "--mixers"),
    widths: list[int] = typer.Option([64, 256], "--widths"),
    share: int = typer.Option(6, help="processes sharing the GPU (k)"),
    seconds: float = typer.Option(10.0, help="timed wall seconds of each shared process"),
    rounds: int = typer.Option(3, help="timed rounds of the one-thread CPU and one-process GPU cells"),
    steps: int = typer.Option(20, help="steps per GPU block (CPU blocks: a fifth of it, at least 2)"),
    json_out: Path | None = typer.Option(None, "--json", help="also write the table here"),
) -> None:
    if not torch.cuda.is_available():
        raise SystemExit("device_throughput: torch sees no CUDA device (it compares one against a CPU core)")
    torch.set_num_threads(1)
    cells = [(m, d) for m in mixers for d in widths]
    cpu = {(m, d): Cell(paper_step(m, d, "cpu")) for m, d in cells}
    measure(list(cpu.values()), rounds, max(2, steps // 5))
    rows = []
    for m, d in cells:
        one = cuda_rate(paper_step(m, d, "cuda"), rounds, steps)
        with tempfile.TemporaryDirectory() as tmp:
            trainer = cuda_rate(trainer_step(m, Path(tmp), d, "cuda"), rounds, steps)
        shared = shared_rates(m, d, share, seconds)
        rows.append({"mixer": m, "d_model": d, "cpu_1thread": cpu[m, d].rate(), "cuda_1proc": one, "cuda_trainer": trainer,
                     "shared_k": share, "cuda_shared_per_run": statistics.median(shared), "cuda_shared_total": sum(shared)})
        print(f"{m} d={d} done", flush=True)
    print(f"\n## published AR bare step (T=37, 2 layers, batch 32): {torch.cuda.get_device_name()} against one CPU core of this machine")
    print(f"{'mixer':<10} {'d':>4} {'cpu 1 thr':>10} {'cuda':>8} {'/cpu':>6} {'trainer':>8} {'/bare':>6} {f'x{share} per run':>12} {'/cpu':>6} {'total':>8} {'/cpu':>6}")
    for r in rows:
        c = r["cpu_1thread"]
        print(f"{r['mixer']:<10} {r['d_model']:>4} {c:>10.1f} {r['cuda_1proc']:>8.1f} {r['cuda_1proc'] / c:>6.1f} "
              f"{r['cuda_trainer']:>8.1f} {r['cuda_trainer'] / r['cuda_1proc']:>6.2f} "
              f"{r['cuda_shared_per_run']:>12.1f} {r['cuda_shared_per_run'] / c:>6.1f} {r['cuda_shared_total']:>8.1f} {r['cuda_shared_total'] / c:>6.1f}")
    if json_out:
        json_out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    typer.run(main)
