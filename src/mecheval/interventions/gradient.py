"""Attribution patching: the first-order estimate of every cell's patched score from one forward pass on
each input and one backward pass (Nanda, "Attribution patching", 2023; Syed et al., 2023).

For a cell (site s, positions P) the exact patched score m(base with a_s[P] := source) is estimated as

    m_patched ≈ m_base + Σ_{t ∈ P} (a_s,source[t] − a_s,base[t]) · ∂m/∂a_s[t] |_base

with m the answer's probability (and, separately, its logit), averaged over the answer positions as in
`engine.answer_scores`. Every site and position comes from the same two passes, so the cost does not
grow with the number of cells. The estimate is exact for a model linear in the site; it errs where m
saturates (a softmax near 0 or 1) or the patch moves the activation far (for Based's state, whose
normaliser divides, too); `benchmarks/gradient_patching.py`
measures by how much on trained runs. A state site (`models.states`) takes ∂m/∂(the tensor the state
feeds) from the same backward pass, and `StateValue.first_order_every` turns it into (h_source,t − h_t) ·
∂m/∂h_t for every t: one more pass of the recurrence per row chunk (closed forms for H3's time-invariant
SSM and Based's sums), not one response per position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from mecheval.interventions.engine import Cell, _as_2d, _run, answer_scores, one_position
from mecheval.models.lm import LM
from mecheval.models.sites import record
from mecheval.models.states import StateSite


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
    flat = torch.arange(B, device=base.device)
    rows = flat[:, None]
    answer, answer_pos = _as_2d(answer), _as_2d(answer_pos)
    where = {k: _as_2d(v) for k, v in where.items()}
    sites = lm.sites()
    names = sorted({c.site for c in cells})
    states = {n: list(dict.fromkeys(c.position for c in cells if c.site == n)) for n in names if isinstance(sites[n], StateSite)}
    at = {(n, k): one_position(Cell(n, k), where) for n, keys in states.items() for k in keys}  # [B] each
    with torch.no_grad(), record(sites, names) as src:
        p_source, logit_source = _scores(lm, source, answer, answer_pos)
        src = dict(src)
    with torch.enable_grad(), record(sites, names) as acts:
        p_base, logit_base = _scores(lm, base, answer, answer_pos)
        acts = dict(acts)
        inputs = [acts[n].output if n in states else acts[n] for n in names]  # a state: ∂m/∂(what it feeds)
        grad_p = torch.autograd.grad(p_base.sum(), inputs, retain_graph=True, allow_unused=True)
        grad_logit = torch.autograd.grad(logit_base.sum(), inputs, allow_unused=True)
    # per site, the first-order change of each score from patching each position alone: [B, T] (the state
    # after each position, for a state site; a cell of K positions adds its K entries)
    changes: dict[str, tuple] = {}
    with torch.no_grad():
        for n, x, gp, gl in zip(names, inputs, grad_p, grad_logit):
            grads = [torch.zeros_like(x) if g is None else g for g in (gp, gl)]
            if n in states:
                changes[n] = tuple(acts[n].detached().first_order_every(src[n], grads))
            else:
                diff = src[n] - acts[n].detach()  # [B, T, D_site]
                changes[n] = tuple((diff * g).flatten(2).sum(-1) for g in grads)  # [B, T]: a site may carry [B, T, ...]
    p_patched, logit_patched = [], []
    for cell in cells:
        for out, base_score, change in zip((p_patched, logit_patched), (p_base, logit_base), changes[cell.site]):
            if cell.site in states:
                delta = change[flat, at[cell.site, cell.position]]
            else:
                delta = change[rows, where[cell.position]].sum(1)
            out.append((base_score.detach() + delta).cpu())
    return dict(
        p_base=p_base.detach().cpu(), logit_base=logit_base.detach().cpu(), p_source=p_source.cpu(),
        logit_source=logit_source.cpu(), p_patched=torch.stack(p_patched), logit_patched=torch.stack(logit_patched),
    )
