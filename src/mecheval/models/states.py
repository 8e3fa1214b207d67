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
    value.every()                      -> h_t for every t: [B, T, D_state]
    value.first_order_every(src, gs)   -> (h_src,t − h_t) · ∂m/∂h_t for every t, given ∂m/∂output (what
                                          attribution patching needs: O(T), not T patches)
Every recurrence here is linear in its state, h_s = Φ_s h_{s-1} + b_s, so replacing h_t by h_t + δ changes
every later state by Φ_s ⋯ Φ_{t+1} δ (the zero-input response from δ) and nothing before t. Each mixer
gives `at` and that response (`respond`) on its parallel form, from the tensors its forward already has.
Moving every state at once, by δ_t after each t, changes h_s by Φ_s g_{s-1} with g_s = Φ_s g_{s-1} + δ_s:
one more pass of the recurrence (`_every`, `_change_every`; the defaults loop over positions instead),
which `first_order_every` differentiates.
A short conv's window is not part of `state` (patch `conv_in` / `conv_out` for it).
Work is split into row chunks of at most STATE_BUDGET floats of the largest intermediate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

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

    @property
    def steps(self) -> int:
        """T, the positions of `output` (its dim 1 unless a subclass says otherwise)."""
        return self.output.shape[1]

    @property
    def work_every(self) -> int:
        """Floats per row in the largest intermediate of `_every` / `_change_every` (a few states per position)."""
        return 4 * self.steps * self.size

    def _every(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [n] -> the state after every position, [n, T, D_state] (default: `_at` at each)."""
        return torch.stack([self._at(rows, torch.full_like(rows, t)) for t in range(self.steps)], dim=1)

    def _change_every(self, rows: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """The change of `output[rows]` when the state after every t moves by delta[:, t] [n, T, D_state]
        (default: the single moves' changes added, exact where the output is linear in the state)."""
        return sum(self._change(rows, torch.full_like(rows, t), delta[:, t]) for t in range(self.steps))

    def every(self) -> torch.Tensor:
        """The state after every position of every row: [B, T, D_state]."""
        rows = torch.arange(self.output.shape[0], device=self.output.device)
        return torch.cat([self._every(rows[c]) for c in row_chunks(len(rows), self.work_every)])

    @property
    def work_first_order(self) -> int:
        """Floats per row in the largest intermediate of `_first_order` (sets its row chunks)."""
        return self.work_every

    def _first_order(self, source: "StateValue", rows: torch.Tensor, grads: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """`first_order_every` of rows [n] (grads: those rows' [n, T, ...]). Default: the states' difference δ
        scaled by a leaf ε [n, T] is carried by `_change_every`, linear in it, so ∂/∂ε_t ⟨change, g⟩ is the
        product asked for."""
        with torch.no_grad():
            delta = source._every(rows) - self._every(rows)  # [n, T, D_state]
        with torch.enable_grad():
            eps = torch.zeros(delta.shape[:2], dtype=delta.dtype, device=delta.device, requires_grad=True)
            change = self._change_every(rows, eps[..., None] * delta)
            return [torch.autograd.grad(change, eps, g.to(change.dtype), retain_graph=True)[0] for g in grads]

    def first_order_every(self, source: "StateValue", grads: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """For each g = ∂m/∂output [B, T, ...] in `grads`: (h_source,t − h_t) · ∂m/∂h_t for every t, [B, T],
        the first-order change of m from setting this value's state after t to the source's (attribution
        patching of every state cell), row chunk by row chunk (never [B, T, D_state] for the whole batch).
        The values must be detached (`detached`)."""
        rows = torch.arange(self.output.shape[0], device=self.output.device)
        parts: list[list[torch.Tensor]] = [[] for _ in grads]
        for c in row_chunks(len(rows), self.work_first_order):
            for part, value in zip(parts, self._first_order(source, rows[c], [g[c] for g in grads])):
                part.append(value)
        return [torch.cat(p) for p in parts]

    def detached(self) -> "StateValue":
        """The same value with every tensor detached from the autograd graph."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{k: v.detach() for k, v in fields.items() if isinstance(v, torch.Tensor)})

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


@dataclasses.dataclass(frozen=True)
class MatrixState(StateValue):
    """A state of one matrix S [H, d_k, d_v] per head, written from keys and values (DeltaNet, the DPLR mixers)."""

    q: torch.Tensor  # [B, T, H, d_k]
    k: torch.Tensor  # [B, T, H, d_k]
    v: torch.Tensor  # [B, T, H, d_v]

    @property
    def size(self) -> int:
        return self.k.shape[2] * self.k.shape[3] * self.v.shape[3]

    @property
    def work(self) -> int:
        return self.q.shape[1] * (self.v[0, 0].numel() + self.size)  # every state, and the outputs


class StateSite(Site):
    """The site `state`: identity on a `StateValue` (hooks read it with `at` and patch it with `patched`)."""

    def forward(self, value: StateValue) -> StateValue:  # type: ignore[override]
        return value


def row_chunks(n: int, floats_per_row: int) -> Iterator[slice]:
    """Slices of range(n) whose rows hold at most STATE_BUDGET floats together (at least one row each)."""
    step = max(1, STATE_BUDGET // max(1, floats_per_row))
    for lo in range(0, n, step):
        yield slice(lo, min(n, lo + step))
