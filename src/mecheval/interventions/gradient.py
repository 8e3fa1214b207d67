"""Attribution patching: the first-order estimate of every cell's patched score from one forward pass on
each input and one backward pass (Nanda, "Attribution patching", 2023; Syed et al., 2023).

For a cell (site s, positions P) the exact patched score m(base with a_s[P] := source) is estimated as

    m_patched ≈ m_base + Σ_{t ∈ P} (a_s,source[t] − a_s,base[t]) · ∂m/∂a_s[t] |_base

with m the answer's probability (and, separately, its logit), averaged over the answer positions as in
`engine.answer_scores`. Every site and position comes from the same two passes, so the cost does not
grow with the number of cells. The estimate is exact for a model linear in the site; it errs where m
saturates (a softmax near 0 or 1) or the patch moves the activation far; `benchmarks/gradient_patching.py`
measures by how much on trained runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from mecheval.interventions.engine import Cell, _as_2d, _run, answer_scores
from mecheval.models.lm import LM
from mecheval.models.sites import record


def _scores(lm: LM, tokens: torch.Tensor, answer: torch.Tensor, answer_pos: torch.Tensor):
    """(p [B], logit [B]) of the answer, every position of every block computed (no narrow tail, so that
    each site carries [B, T, D_site])."""
    return answer_scores(_run(lm, tokens, answer_pos, narrow=False), answer)


def gradient_cells(
    lm: LM,
    base: torch.Tensor,
    source: torch.Tensor,
    cells: Sequence[Cell],
    where: Mapping[str, torch.Tensor],
    answer: torch.Tensor,
    answer_pos: torch.Tensor,
    chunk: int | None = None,
) -> dict[str, torch.Tensor]:
    """`engine.patch_cells` by attribution patching: the same arguments and returned scores
    (`p_patched`, `logit_patched` [C, B] are first-order estimates; `chunk` is accepted and unused)."""
    del chunk
    B = base.shape[0]
    rows = torch.arange(B, device=base.device)[:, None]
    answer, answer_pos = _as_2d(answer), _as_2d(answer_pos)
    where = {k: _as_2d(v) for k, v in where.items()}
    sites = lm.sites()
    names = sorted({c.site for c in cells})
    with torch.no_grad(), record(sites, names) as src:
        p_source, logit_source = _scores(lm, source, answer, answer_pos)
        src = {n: src[n].detach() for n in names}
    with torch.enable_grad(), record(sites, names) as acts:
        p_base, logit_base = _scores(lm, base, answer, answer_pos)
        inputs = [acts[n] for n in names]
        grad_p = torch.autograd.grad(p_base.sum(), inputs, retain_graph=True, allow_unused=True)
        grad_logit = torch.autograd.grad(logit_base.sum(), inputs, allow_unused=True)
    grads = {n: (gp, gl) for n, gp, gl in zip(names, grad_p, grad_logit)}
    p_patched, logit_patched = [], []
    for cell in cells:
        pos = where[cell.position]  # [B, K]
        delta = src[cell.site][rows, pos] - acts[cell.site][rows, pos].detach()  # [B, K, D]
        for out, base_score, g in ((p_patched, p_base, grads[cell.site][0]), (logit_patched, logit_base, grads[cell.site][1])):
            change = torch.zeros_like(base_score) if g is None else (delta * g[rows, pos]).flatten(1).sum(1)
            out.append((base_score.detach() + change).cpu())
    return dict(
        p_base=p_base.detach().cpu(), logit_base=logit_base.detach().cpu(), p_source=p_source.cpu(),
        logit_source=logit_source.cpu(), p_patched=torch.stack(p_patched), logit_patched=torch.stack(logit_patched),
    )
