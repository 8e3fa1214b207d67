"""The chunk grid the chunked forms of the recurrences share (`ssd`, `dplr`, `delta_rule`, `selective_scan`):
T steps in nc chunks of L <= chunk_size steps, as even as possible, so that the nc * L - T padded steps at the
end (zeros: each op's padding leaves its state unchanged, and their outputs are dropped) are the fewest."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def chunk_grid(T: int, chunk_size: int) -> tuple[int, int]:
    """-> (nc, L): the number of chunks and their length."""
    nc = -(-T // chunk_size)
    return nc, -(-T // nc)


def into_chunks(z: torch.Tensor, nc: int, L: int) -> torch.Tensor:
    """z [B, T, ...], zero-padded at the end to nc * L steps -> a view [B, nc, L, ...]."""
    z = F.pad(z, (0, 0) * (z.dim() - 2) + (0, nc * L - z.shape[1]))
    return z.view(z.shape[0], nc, L, *z.shape[2:])
