"""Attribution patching: the first-order estimate of every cell's patched score from one forward pass on
each input and one backward pass (Nanda, "Attribution patching", 2023; Syed et al., 2023), with the AtP*
corrections where the model saturates outside the tangent (Kramár et al., 2024; `corrections`).

For a cell (site s, positions P) the exact patched score m(base with a_s[P] := source) is estimated as

    m_patched ≈ m_base + Σ_{t ∈ P} (a_s,source[t] − a_s,base[t]) · ∂m/∂a_s[t] |_base

with m the answer's probability (and, separately, its logit), averaged over the answer positions as in
`engine.answer_scores`. Every site and position comes from the same two passes, so the cost does not
grow with the number of cells. The estimate is exact for a model linear in the site; it errs where m
saturates (a softmax near 0 or 1) or the patch moves the activation far (for Based's state, whose
normaliser divides, too). By default (`correction="all"`) the probability is estimated through each
answer's margin and mapped through the softmax exactly, a cell feeding an attention layer's queries
and keys gets that layer's attention exactly, and the last block's position-wise cells are patched
exactly (`corrections`); `correction="none"` is the plain estimate, and `correction="all,mixer"` also
runs each recurrent or convolutional mixer a cell feeds exactly (about one mixer pass per cell's input and
positions: opt-in, it costs more than the estimate is meant to).
Both are returned (`p_linear`, `logit_linear`: the plain one), so their gap can flag unreliable cells.
`benchmarks/gradient_patching.py` measures the agreement with exact patching on trained runs.
A state site (`models.states`) takes ∂m/∂(the tensor the state
feeds) from the same backward pass, and `StateValue.first_order_every` turns it into (h_source,t − h_t) ·
∂m/∂h_t for every t: one more pass of the recurrence per row chunk (closed forms for H3's time-invariant
SSM and Based's sums), not one response per position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from mecheval.interventions.corrections import (
    FEEDING, answer_margins, in_tail, parse_correction, projections, tail_scores, tail_sites,
)
from mecheval.interventions.engine import Cell, _as_2d, _run, answer_scores, one_position
from mecheval.models.lm import LM
from mecheval.models.sites import record
from mecheval.models.states import StateSite


def gradient_cells(
    lm: LM,
    base: torch.Tensor,
    source: torch.Tensor,
    cells: Sequence[Cell],
    where: Mapping[str, torch.Tensor],
    answer: torch.Tensor,
    answer_pos: torch.Tensor,
    chunk: int | None = None,
    correction: str | Sequence[str] = "all",
) -> dict[str, torch.Tensor]:
    """`engine.patch_cells` by attribution patching: the same arguments and returned scores
    (`p_patched`, `logit_patched` [C, B] are estimates, with the `corrections` named by `correction`:
    "all", "none" or names among `corrections.CORRECTIONS`), plus `p_linear`, `logit_linear` [C, B]: the
    plain first-order estimates. `chunk` is accepted and unused (the attention correction sizes its own)."""
    del chunk
    fixes = parse_correction(correction)
    answer, answer_pos = _as_2d(answer), _as_2d(answer_pos)
    where = {k: _as_2d(v) for k, v in where.items()}
    sites = lm.sites()
    # cell -> (the correction of the mixer it feeds, that layer, how): attention's and the other mixers' are disjoint
    targets = {c: (fix, *t) for fix, feeding in FEEDING.items() if fix in fixes
               for c in cells if (t := feeding.target(lm, c)) is not None}
    layers = sorted({layer for fix, layer, _ in targets.values() if fix == "attention"})
    inner = {n for fix, layer, how in targets.values() for n in FEEDING[fix].sites(layer, how)}
    tail = [i for i, c in enumerate(cells) if in_tail(lm, c)] if "tail" in fixes else []
    inner |= set(tail_sites(lm)) if tail else set()
    names = sorted({c.site for c in cells} | inner)
    states = {n: list(dict.fromkeys(c.position for c in cells if c.site == n)) for n in names if isinstance(sites[n], StateSite)}
    for n, keys in states.items():  # a state is patched at one position per example: ValueError else
        for k in keys:
            one_position(Cell(n, k), where)
    watched = projections(lm, layers)  # the attention layers' q, k, v, recorded beside the sites
    with torch.no_grad(), record({**sites, **watched}, [*names, *watched]) as src:
        p_source, logit_source = answer_scores(_run(lm, source, answer_pos, narrow=False), answer)
        src = dict(src)
    with torch.enable_grad(), record({**sites, **watched}, [*names, *watched]) as acts:
        logits = _run(lm, base, answer_pos, narrow=False)
        p_base, logit_base = answer_scores(logits, answer)
        margins = answer_margins(logits, answer)  # [B, Q]
        acts = dict(acts)
        inputs = [acts[n].output if n in states else acts[n] for n in names]  # a state: ∂m/∂(what it feeds)
        # the metrics whose first-order changes are taken: each answer's margin (or p), then the logit
        metrics = [margins[:, q].sum() for q in range(margins.shape[1])] if "answer" in fixes else [p_base.sum()]
        metrics.append(logit_base.sum())
        grads = [torch.autograd.grad(m, inputs, retain_graph=True, allow_unused=True) for m in metrics]
    grads = [[torch.zeros_like(x) if g[i] is None else g[i] for g in grads] for i, x in enumerate(inputs)]  # per site
    # per cell site, the first-order change of each metric from patching each position alone: [M, B, T] (the
    # state after each position, for a state site; a cell of K positions adds its K entries)
    changes: dict[str, torch.Tensor] = {}
    cell_sites = {c.site for c in cells}
    with torch.no_grad():
        for n, x, g in zip(names, inputs, grads):
            if n in states:
                changes[n] = torch.stack(acts[n].detached().first_order_every(src[n], g))
            elif n in cell_sites:
                diff = src[n] - acts[n].detach()  # [B, T, D_site]
                changes[n] = torch.stack([(diff * gm).flatten(2).sum(-1) for gm in g])  # a site may carry [B, T, ...]
        plain = _per_cell(changes, cells, where)  # [C, M, B]
        fixed = plain.clone()
        read = {f"layers.{layer}.{k}" for fix, layer, _ in targets.values() for k in FEEDING[fix].grads}  # the corrections' gradients
        grad_of = {n: torch.stack(g) for n, g in zip(names, grads) if n in read}  # [M, B, T, D] each
        base_acts = {n: acts[n].detach() for n in inner | set(watched)}
        for fix, layer in dict.fromkeys((fix, layer) for fix, layer, _ in targets.values()):
            idx = [i for i, c in enumerate(cells) if c in targets and targets[c][:2] == (fix, layer)]
            fixed[idx] = FEEDING[fix].estimates(lm, layer, [targets[cells[i]][2] for i in idx],
                                                [cells[i].position for i in idx], where, base_acts, src, grad_of)
        p_base, logit_base = p_base.detach(), logit_base.detach()
        if "answer" in fixes:
            mu, slope = margins.detach(), margins.detach().sigmoid() * (-margins.detach()).sigmoid()  # [B, Q]: σ'(μ)
            p_patched = p_base + ((mu + fixed[:, :-1].transpose(1, 2)).sigmoid() - mu.sigmoid()).mean(-1)  # [C, B]
            p_linear = p_base + (slope * plain[:, :-1].transpose(1, 2)).mean(-1)
        else:
            p_patched, p_linear = p_base + fixed[:, 0], p_base + plain[:, 0]
        logit_patched = logit_base + fixed[:, -1]
        if tail:
            p, logit, hit = tail_scores(lm, [cells[i] for i in tail], where, base_acts, src, answer, answer_pos)
            p_patched[tail], logit_patched[tail] = p.where(hit, p_base), logit.where(hit, logit_base)
    return dict(
        p_base=p_base.cpu(), logit_base=logit_base.cpu(), p_source=p_source.cpu(), logit_source=logit_source.cpu(),
        p_patched=p_patched.cpu(), logit_patched=logit_patched.cpu(),
        p_linear=p_linear.cpu(), logit_linear=(logit_base + plain[:, -1]).cpu(),
    )


def _per_cell(changes: Mapping[str, torch.Tensor], cells: Sequence[Cell], where: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Each cell's change [C, M, B]: its site's changes [M, B, T] summed over its positions where[position] [B, K]."""
    sites = {n: i for i, n in enumerate(dict.fromkeys(c.site for c in cells))}
    keys = {k: i for i, k in enumerate(dict.fromkeys(c.position for c in cells))}
    every = torch.stack([changes[n] for n in sites])  # [N, M, B, T]
    by_key = torch.stack([every.gather(-1, where[k].expand(*every.shape[:2], -1, -1)).sum(-1) for k in keys])  # [P, N, M, B]
    return by_key[[keys[c.position] for c in cells], [sites[c.site] for c in cells]]
