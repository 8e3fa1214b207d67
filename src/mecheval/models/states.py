"""Recurrent-state sites: the state after each position, patchable on the parallel (training) path.

A mixer with a recurrent state h (Mamba's h_t, H3's SSM state x_t, DeltaNet's S_t, Based's running sums
(S_t, z_t)) has a site `state` (`layers.{i}.state`) whose value at position t is h_t, the state *after*
t, flattened to D_state real numbers. It is never materialised for every position: the site carries a
`StateValue`, the mixer-internal output the state feeds together with what the recurrence was computed
from, and
    value.at(rows, pos)                -> h_pos of those rows: [n, D_state]
    value.patched(rows, pos, new)      -> the same value whose `output` is what the mixer computes when
                                          h_pos := new and the recurrence continues from it at pos + 1
                                          (positions up to pos unchanged)
Every recurrence here is linear in its state, h_s = Φ_s h_{s-1} + b_s, so replacing h_t by h_t + δ changes
every later state by Φ_s ⋯ Φ_{t+1} δ (the zero-input response from δ) and nothing before t. Each mixer
gives `at` and that response (`respond`) on its parallel form, from the tensors its forward already has.
A short conv's window is not part of `state` (patch `conv_in` / `conv_out` for it).
Work is split into row chunks of at most STATE_BUDGET floats of the largest intermediate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch

from mecheval.models.sites import Site

STATE_BUDGET = 2**24  # floats in the largest intermediate of one chunk of rows (64 MB in float32)


@dataclasses.dataclass(frozen=True)
class StateValue:
    """What a `StateSite` carries: `output` [B, T, ...], the tensor the state feeds inside the mixer, and
    the recurrence's inputs (subclass fields). Subclasses define `size`, `work`, `_at` and `_change`."""

    output: torch.Tensor

    @property
    def size(self) -> int:
        """D_state: real numbers per position."""
        raise NotImplementedError

    @property
    def work(self) -> int:
        """Floats per row in the largest intermediate of `_at` / `_change` (sets the row chunks)."""
        raise NotImplementedError

    def _at(self, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """rows, pos [n] -> the state after pos, [n, D_state]."""
        raise NotImplementedError

    def _change(self, rows: torch.Tensor, pos: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """The change of `output[rows]` when the state after pos moves by delta [n, D_state]: [n, T, ...]."""
        raise NotImplementedError

    def at(self, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """rows, pos [n] -> the state after pos in each row, [n, D_state]."""
        parts = [self._at(rows[c], pos[c]) for c in row_chunks(len(rows), self.work)]
        return torch.cat(parts) if parts else self.output.new_zeros(0, self.size)

    def respond(self, rows: torch.Tensor, pos: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """`output` with the state after pos of each row moved by delta [n, D_state]: [B, T, ...]
        (rows may repeat: their changes add; exact where the output is linear in the state)."""
        out = self.output
        for c in row_chunks(len(rows), self.work):
            out = out.index_add(0, rows[c], self._change(rows[c], pos[c], delta[c]).to(out.dtype))
        return out

    def patched(self, rows: torch.Tensor, pos: torch.Tensor, values: torch.Tensor) -> "StateValue":
        """This value with the state after pos set to values [n, D_state] (one position per row)."""
        if len(torch.unique(rows)) != len(rows):
            raise ValueError("a state site is patched at one position per example (got several)")
        delta = values.to(self.output.dtype) - self.at(rows, pos)
        return dataclasses.replace(self, output=self.respond(rows, pos, delta))


class StateSite(Site):
    """The site `state`: identity on a `StateValue` (hooks read it with `at` and patch it with `patched`)."""

    def forward(self, value: StateValue) -> StateValue:  # type: ignore[override]
        return value


def row_chunks(n: int, floats_per_row: int) -> Iterator[slice]:
    """Slices of range(n) whose rows hold at most STATE_BUDGET floats together (at least one row each)."""
    step = max(1, STATE_BUDGET // max(1, floats_per_row))
    for lo in range(0, n, step):
        yield slice(lo, min(n, lo + step))
