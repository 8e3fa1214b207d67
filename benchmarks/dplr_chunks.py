"""Forward+backward time of the chunkwise DPLR recurrence (`ops.dplr.dplr`) against its chunk length, on CPU.

For each mixer's shapes at the cpu scale (d = 64, the ATR batch B = 128: GLA H = 4, d_k = 8, d_v = 16, a
decay per key dimension; RWKV-7 H = 1, d_k = d_v = 64, a decay per key dimension and the low-rank term;
DeltaProduct H = 1, d_k = d_v = 64, n_h = 2 steps a token, one decay per head and the low-rank term) and
each T, `dplr(q, k, v, log_w, a, b, chunk_size=L)` and `.sum().backward()` are timed for every L (the
pairwise terms factored where the decay allows, as the op does), side by side in one process, beside the
reference: the way before 2026-12-07, the op's own chunk of then (8 with a decay per key dimension, 32 per
head) with the pairwise terms summed from their differences (`FACTORED_SPAN` 0: never factored), and
`chunk_size=None` (the op's own choice now, `ops.dplr.chunk_length`). Ratios are reference / column (> 1:
faster).

    python benchmarks/dplr_chunks.py [--T 24 --T 96] [--chunks 32,16,8,4] [--threads 1]
"""

from __future__ import annotations

import sys

import torch
import typer
from rich.console import Console
from rich.table import Table

from common import median_seconds
import mecheval.models.ops.dplr as ops_dplr
from mecheval.models.ops.dplr import chunk_length, dplr

BATCH = 128
# name: (H, d_k, d_v, steps a token, decay per key dimension, low-rank term)
SHAPES = {
    "gla": (4, 8, 16, 1, True, False),
    "rwkv7": (1, 64, 64, 1, True, True),
    "deltaproduct": (1, 64, 64, 2, False, True),
}


def inputs(name: str, T: int) -> list[torch.Tensor | None]:
    """Random inputs of the mixer's shapes, all requiring grad: q, k, v, log_w, a, b (a, b None without the
    low-rank term); decays as RWKV-7's range, -log w in (0, e^{-1/2})."""
    H, dk, dv, n, per_dim, low_rank = SHAPES[name]
    g = torch.Generator().manual_seed(0)
    steps = T * n

    def rand(*shape, scale=1.0):
        return (scale * torch.randn(BATCH, steps, *shape, generator=g)).requires_grad_()

    log_w = (-0.6 * torch.rand(BATCH, steps, H, dk if per_dim else 1, generator=g)).requires_grad_()
    a = torch.nn.functional.normalize(torch.randn(BATCH, steps, H, dk, generator=g), dim=-1)
    ab = [(-a).requires_grad_(), (0.5 * a).requires_grad_()] if low_rank else [None, None]
    return [rand(H, dk, scale=dk**-0.5), rand(H, dk), rand(H, dv), log_w, *ab]


def seconds_per_call(args, chunk: int | None, repeats: int, factored: bool = True) -> float:
    def fwd_bwd() -> None:
        for x in args:
            if x is not None:
                x.grad = None
        dplr(*args, chunk_size=chunk).sum().backward()

    span = ops_dplr.FACTORED_SPAN
    ops_dplr.FACTORED_SPAN = span if factored else 0.0
    try:
        return median_seconds(fwd_bwd, repeats=repeats)
    finally:
        ops_dplr.FACTORED_SPAN = span


def main(
    T: list[int] = typer.Option([24, 48, 96, 256], "--T", help="tokens a sequence"),
    chunks: str = typer.Option("32,16,8,4", help="chunk lengths to time, comma-separated"),
    mixers: list[str] = typer.Option(list(SHAPES), "--mixers"),
    repeats: int = typer.Option(5, help="timed calls a cell (median), after one warmup"),
    threads: int = typer.Option(1, help="torch threads"),
) -> None:
    torch.set_num_threads(threads)
    lengths = [int(c) for c in chunks.split(",")]
    cols = [*(str(L) for L in lengths), "auto"]
    table = Table(title=f"dplr forward+backward ms, B={BATCH}, {threads} thread(s), median of {repeats}; "
                        f"ratio = before (unfactored, its chunk then) / column")
    for col in ["mixer", "T", "auto L", "ms before", *(f"ms L={c}" for c in cols), *(f"x L={c}" for c in cols)]:
        table.add_column(col, justify="left" if col == "mixer" else "right")
    console = Console(width=None if sys.stdout.isatty() else 200)
    for name in mixers:
        for t in T:
            args = inputs(name, t)
            ms = {str(L): 1e3 * seconds_per_call(args, L, repeats) for L in lengths}
            ms["auto"] = 1e3 * seconds_per_call(args, None, repeats)
            ref = 1e3 * seconds_per_call(args, 8 if SHAPES[name][4] else 32, repeats, factored=False)
            auto = chunk_length(args[3])
            table.add_row(name, str(t), str(auto), f"{ref:.0f}", *(f"{ms[c]:.0f}" for c in cols),
                          *(f"{ref / ms[c]:.2f}" for c in cols))
            console.print(f"{name} T={t}: " + ", ".join(f"L={c} {ms[c]:.0f} ms" for c in cols), highlight=False)
    console.print(table)


if __name__ == "__main__":
    typer.run(main)
