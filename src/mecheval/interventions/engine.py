"""Batched interchange interventions: patch one run's activation into another, many cells per pass.

A *cell* is one (site, position) pair. For a base input and a source input of the same shape, the
patched run is the base run with the site's activation at the cell's position (per example)
replaced by the source run's activation there. The metric is read at `answer_pos`: the probability
and logit of the clean answer. That definition, one plain forward per cell, is `reference.reference_patch_cells`;
this engine computes the same scores (tested equal) sharing the work:
    source run once  -> the source activation of every requested site at every position key
    base run once    -> the base scores, the residual entering every layer, every mixer's output
    per chunk        -> cells that start at the same point, one tile of examples per cell, in one pass:
      a site up to the mixer of layer i   the base residual entering layer i, run from there;
      a site after the mixer of layer i   that part of the block is position-wise: it runs only at
                                          the patched positions (from the base's residual and mixer
                                          output there), is written into the base residual
                                          entering layer i + 1, and the run goes on from there.
    The last block's position-wise part always runs only at `answer_pos` (`narrow_tail`).
A tile holds only the examples the patch changes: where the source activation equals the base's at
the cell's positions (or, in the last block's position-wise part, no position is an answer position)
the patched run is the base run, and its scores are copied.
State sites (`layers.{i}.state`, `mecheval.models.states`) are patched at one position per example: the
source state is computed only for a tile's examples when its pass runs (never for all positions), and
an example is active where the two inputs differ at or before that position (the state after t depends
on nothing later). A pass over state cells holds at most STATE_BUDGET floats of source states.
Hooks are scoped (`mecheval.models.sites.attach`): removed on exit, even on error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from mecheval.models.lm import LM, Block
from mecheval.models.sites import attach, matches, record
from mecheval.models.states import STATE_BUDGET, StateSite, StateValue

TOKEN_BUDGET = 2**16  # default bound on the token rows (tile examples × T) of one patched pass


@dataclass(frozen=True)
class Cell:
    site: str  # full site name, e.g. "layers.1.resid_pre"
    position: str  # a key of the `where` mapping (a role name, or a position index as a string)

    @property
    def layer(self) -> int:
        return int(self.site.split(".")[1])

    @property
    def kind(self) -> str:
        return self.site.split(".", 2)[2]


def resolve_sites(lm: LM, patterns: Sequence[str]) -> list[str]:
    """Site names matching any glob (`layers.*.resid_pre`), in forward order.

    A pattern without a dot names a site kind in every layer (`resid_pre` = `layers.*.resid_pre`).
    """
    names = list(lm.sites())
    out = []
    for pat in patterns:
        hits = matches(names, pat)
        pat = pat if "." in pat else f"layers.*.{pat}"
        if not hits:
            raise ValueError(f"site pattern {pat!r} matches no site{_no_state_hint(lm, pat)}; known: {names}")
        out += hits
    return sorted(set(out), key=names.index)


def _no_state_hint(lm: LM, pattern: str) -> str:
    """Where a state site was asked for: which of the model's mixers have no recurrent state."""
    if pattern.rsplit(".", 1)[-1] != "state":
        return ""
    stateless = sorted({type(b.mixer).__name__ for b in lm.layers if not any(isinstance(m, StateSite) for m in b.mixer.modules())})
    return f" ({', '.join(stateless)}: no recurrent state, so no state site)" if stateless else ""


def _as_2d(x: torch.Tensor) -> torch.Tensor:
    return x if x.dim() == 2 else x[:, None]


def answer_scores(logits: torch.Tensor, answer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N, Q, V], answer [N, Q] -> (probability, logit) of the answer, averaged over Q: [N] each
    (differentiable: `gradient.gradient_cells` takes their gradients)."""
    logits = logits.float()
    logit = logits.gather(-1, answer[..., None])[..., 0]
    return (logit - logits.logsumexp(-1)).exp().mean(-1), logit.mean(-1)


@torch.no_grad()
def run_scores(lm: LM, tokens: torch.Tensor, answer: torch.Tensor, answer_pos: torch.Tensor):
    """An unpatched run: (p [B], logit [B]) of the answer at `answer_pos`."""
    return answer_scores(lm(tokens, positions=_as_2d(answer_pos)), _as_2d(answer))


@torch.no_grad()
def patch_cells(
    lm: LM,
    base: torch.Tensor,
    source: torch.Tensor,
    cells: Sequence[Cell],
    where: Mapping[str, torch.Tensor],
    answer: torch.Tensor,
    answer_pos: torch.Tensor,
    chunk: int | None = None,
) -> dict[str, torch.Tensor]:
    """Scores of the base run with each cell patched from the source run.

    base, source: tokens [B, T]; where[key]: positions [B] or [B, K] (all K patched together);
    answer, answer_pos: [B] or [B, Q]. `chunk` = cells per forward pass (default: about
    TOKEN_BUDGET / (B*T)). Returns `p_base`, `logit_base`, `p_source`, `logit_source` [B] and
    `p_patched`, `logit_patched` [C, B] (cells in the given order).
    """
    B, T = base.shape
    rows = torch.arange(B, device=base.device)
    answer, answer_pos = _as_2d(answer), _as_2d(answer_pos)
    where = {k: _as_2d(v) for k, v in where.items()}
    sites, last = lm.sites(), len(lm.layers) - 1
    applied = [_applied(c, last) for c in cells]
    names = sorted({c.site for c in cells})
    body = [n for n in names if not _in_tail(Cell(n, ""), last)]  # full-length in a narrow-tail run
    states = {n for n in names if isinstance(sites[n], StateSite)}

    def at(acts, cell):  # an activation at the cell's positions: [B, K, D_site] (a state: computed on demand)
        if cell.site in states:
            return _StateAt(acts[cell.site], one_position(cell, where))
        return acts[cell.site][rows[:, None], where[cell.position]]

    with record(sites, names) as src:
        p_source, logit_source = answer_scores(_run(lm, source, answer_pos, narrow=len(body) == len(names)), answer)
    src_at = [at(src, c) for c in cells]
    del src
    starts = {f"resid{i}": b.resid_pre for i, b in enumerate(lm.layers)}  # the runs' starting points
    starts |= {f"mixed{i}": b.mixer for i, b in enumerate(lm.layers)}
    with record({**starts, **{n: sites[n] for n in body if n not in states}}) as base_acts:
        p_base, logit_base = answer_scores(_run(lm, base, answer_pos, narrow=True), answer)
    differs = source != base  # [B, T]
    active = [
        (where[c.position][:, :, None] == answer_pos[:, None, :]).flatten(1).any(1) if _in_tail(a, last)
        else (differs & (torch.arange(T, device=base.device) <= v.pos[:, None])).any(1) if c.site in states
        else (v != at(base_acts, c)).flatten(1).any(1)
        for c, a, v in zip(cells, applied, src_at)
    ]  # [B] each: the examples whose patched run differs from the base run

    p_patched, logit_patched = p_base.cpu().repeat(len(cells), 1), logit_base.cpu().repeat(len(cells), 1)
    chunk = chunk or max(1, TOKEN_BUDGET // (B * T))
    by_start: dict[tuple, list[int]] = {}
    for i, c in enumerate(applied):
        if active[i].any():
            by_start.setdefault(_start(c, where[c.position].shape[1]), []).append(i)
    for (layer, after_mixer, _), members in sorted(by_start.items()):
        size = max((src_at[i].size for i in members if applied[i].site in states), default=0)
        step = min(chunk, max(1, STATE_BUDGET // (B * size))) if size else chunk
        for lo in range(0, len(members), step):
            idx = members[lo : lo + step]
            ex = [active[i].nonzero()[:, 0] for i in idx]  # each tile holds its cell's active examples
            bounds = torch.tensor([0, *(len(e) for e in ex)]).cumsum(0).tolist()
            flat = torch.cat(ex)
            tiles = [(applied[i], where[applied[i].position][e], src_at[i][e]) for i, e in zip(idx, ex)]
            if after_mixer:
                logits = _from_finish(lm, layer, base_acts, flat, tiles, answer_pos[flat])
            else:
                with attach(sites, _patch_fns(tiles)):
                    resid = base_acts[f"resid{layer}"][flat]  # [N, T, D]
                    logits = lm.forward_from(layer, resid, answer_pos[flat], narrow_tail=True)
            p, logit = answer_scores(logits, answer[flat])
            for i, e, start, end in zip(idx, ex, bounds, bounds[1:]):
                p_patched[i, e.cpu()], logit_patched[i, e.cpu()] = p[start:end].cpu(), logit[start:end].cpu()
    return dict(
        p_base=p_base.cpu(), logit_base=logit_base.cpu(), p_source=p_source.cpu(), logit_source=logit_source.cpu(),
        p_patched=p_patched, logit_patched=logit_patched,
    )


def _from_finish(lm: LM, layer: int, base_acts, flat: torch.Tensor, tiles, answer_pos: torch.Tensor) -> torch.Tensor:
    """Logits of tiles patching sites after the mixer of `layer`: that block's position-wise part runs
    only at the slots that matter (the patched positions; in the last block, `answer_pos`)."""
    last = layer == len(lm.layers) - 1
    slots = answer_pos if last else torch.cat([pos for _, pos, _ in tiles])  # [N, S]
    n = torch.arange(len(flat), device=flat.device)[:, None]
    x = base_acts[f"resid{layer}"][flat[:, None], slots]  # [N, S, D]
    m = base_acts[f"mixed{layer}"][flat[:, None], slots]
    with attach(lm.sites(), _patch_fns(tiles, slots)):
        y = lm.layers[layer].finish(x, m)
    if last:
        return lm.unembed(y)
    resid = base_acts[f"resid{layer + 1}"][flat]  # [N, T, D]
    resid[n, slots] = y
    return lm.forward_from(layer + 1, resid, answer_pos, narrow_tail=True)


def one_position(cell: Cell, where: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """A state cell's positions [B] (a state is patched at one position per example; ValueError else)."""
    pos = where[cell.position]
    if pos.shape[1] != 1:
        raise ValueError(f"{cell.site} is patched at one position per example; {cell.position!r} has {pos.shape[1]}")
    return pos[:, 0]


class _StateAt:
    """A state site's source value at one position per example, computed for the rows asked: `[e]` ->
    [len(e), 1, D_state]."""

    def __init__(self, value: StateValue, pos: torch.Tensor) -> None:
        self.value, self.pos, self.size = value, pos, value.size

    def __getitem__(self, e: torch.Tensor) -> torch.Tensor:
        return self.value.at(e, self.pos[e])[:, None]


def _applied(cell: Cell, last: int) -> Cell:
    """The same patch where its run starts latest: `resid_post` of layer i < last is `resid_pre` of i + 1."""
    if cell.kind == "resid_post" and cell.layer < last:
        return Cell(f"layers.{cell.layer + 1}.resid_pre", cell.position)
    return cell


def _start(cell: Cell, k: int) -> tuple[int, bool, int]:
    """Cells sharing a pass: (layer, after that layer's mixer, positions per example)."""
    after = cell.kind in Block.FINISH_SITES
    return cell.layer, after, k if after else 0


def _in_tail(cell: Cell, last: int) -> bool:
    """The cell is in the last block's position-wise part (which runs only at `answer_pos`)."""
    return cell.layer == last and cell.kind in Block.FINISH_SITES


def _run(lm: LM, tokens: torch.Tensor, answer_pos: torch.Tensor, narrow: bool) -> torch.Tensor:
    return lm.forward_from(0, lm.embed_tokens(tokens), answer_pos, narrow_tail=narrow)


def _patch_fns(tiles, slots: torch.Tensor | None = None):
    """One hook per site; tile t = (cell, positions [n, K], values [n, K, D_site]) owns the next n rows.

    Full-length tensors [N, T, D] get `values` at `positions`. With `slots` ([N, S]), the tensors
    are [N, S, D] (a position-wise part run only at those positions): a value lands in every slot
    holding its position.
    The hooks write in place: a site is an identity on a tensor that only flows on through the site.
    """
    index: dict[str, list] = {}
    offset = 0
    for cell, pos, vals in tiles:
        r = offset + torch.arange(len(pos), device=pos.device)
        if slots is None:
            idx = (r[:, None].expand_as(pos).reshape(-1), pos.reshape(-1), vals.flatten(0, 1))
        else:
            b, k, j = (pos[:, :, None] == slots[r][:, None, :]).nonzero(as_tuple=True)
            idx = (r[b], j, vals[b, k])
        index.setdefault(cell.site, []).append(idx)
        offset += len(pos)
    fns = {}
    for site, parts in index.items():
        r, c, v = (torch.cat(z) for z in zip(*parts))
        fns[site] = lambda x, r=r, c=c, v=v: (
            x.patched(r, c, v) if isinstance(x, StateValue) else x.index_put_((r, c), v.to(x.dtype))
        )
    return fns
