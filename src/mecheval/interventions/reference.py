"""The definition of a cell's patch, one plain forward per cell: the reference that the batched engine
(`engine.patch_cells`) is tested equal to (`pyvene_ref` is the study's own implementation, an optional extra).

For each cell: run the source input and record the cell's site; run the base input with the site's activation
at the cell's positions (per example) replaced by the source's there; read the probability and logit of the
answer at `answer_pos`. A state site (`layers.{i}.state`, `mecheval.models.states`) is replaced at one position
per example, the recurrence continuing from the source's state. None of the engine's speed-ups (runs started
at the patched layer, the position-wise tail run only where it is read, unchanged examples copied): every run
is the whole model over every example and position, two per cell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from mecheval.interventions.engine import Cell, _as_2d, answer_scores, one_position, run_scores
from mecheval.models.lm import LM
from mecheval.models.sites import attach, record
from mecheval.models.states import StateValue


@torch.no_grad()
def reference_patch_cells(
    lm: LM,
    base: torch.Tensor,
    source: torch.Tensor,
    cells: Sequence[Cell],
    where: Mapping[str, torch.Tensor],
    answer: torch.Tensor,
    answer_pos: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """`engine.patch_cells`'s scores by definition: the same arguments (no `chunk`) and the same result,
    `p_base`, `logit_base`, `p_source`, `logit_source` [B] and `p_patched`, `logit_patched` [C, B] (on the CPU)."""
    answer, answer_pos = _as_2d(answer), _as_2d(answer_pos)
    where = {k: _as_2d(v) for k, v in where.items()}
    p_base, logit_base = run_scores(lm, base, answer, answer_pos)
    p_source, logit_source = run_scores(lm, source, answer, answer_pos)
    p_patched, logit_patched = p_base.new_empty(len(cells), len(base)), logit_base.new_empty(len(cells), len(base))
    for i, cell in enumerate(cells):
        with record(lm.sites(), [cell.site]) as recorded:
            lm(source)
        with attach(lm.sites(), {cell.site: _replacing(recorded[cell.site], cell, where)}):
            p_patched[i], logit_patched[i] = answer_scores(lm(base, positions=answer_pos), answer)
    return dict(p_base=p_base.cpu(), logit_base=logit_base.cpu(), p_source=p_source.cpu(),
                logit_source=logit_source.cpu(), p_patched=p_patched.cpu(), logit_patched=logit_patched.cpu())


def _replacing(value: torch.Tensor | StateValue, cell: Cell, where: Mapping[str, torch.Tensor]) -> Callable:
    """The hook on the base run's `cell.site`: its activation [B, T, ...] with the source's `value` at the
    cell's positions where[cell.position] [B, K] (a state: at its one position per example, `one_position`)."""
    pos = where[cell.position]
    rows = torch.arange(len(pos), device=pos.device)
    if isinstance(value, StateValue):
        at = one_position(cell, where)
        new = value.at(rows, at)  # [B, D_state]
        return lambda state: state.patched(rows, at, new)

    def replace(x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[rows[:, None], pos] = value[rows[:, None], pos]
        return x

    return replace
