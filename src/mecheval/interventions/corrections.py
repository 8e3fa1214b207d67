"""Corrections to attribution patching where the model saturates outside the tangent (AtP*, Kramár et al.,
2024), used by `gradient.gradient_cells`.

answer     the answer's softmax. The estimate is made for each answer's margin μ = l_a − logsumexp_{j≠a} l_j
           (its logit against all others, p = σ(μ)) and mapped through σ exactly: p ≈ mean_q σ(μ_q + Δμ_q).
           The plain estimate of p is the same Δμ through σ's tangent, p + Σ_q p_q (1 − p_q) Δμ_q / Q, so
           a cell that moves the answer from near 0 to near 1 is not capped at the tangent.
attention  the attention pattern. For a cell that moves an attention layer's queries and keys at its own
           positions P only (its `resid_pre` or `mixer_in`; the position-wise part of the block before,
           `mixer_out` … `resid_post`, and that block's `core_out` if it is attention too), the patched
           run's input x'_P to that layer is computed exactly (the block before runs position-wise at P),
           that layer's attention is recomputed exactly with the q, k, v of x'_P, and the rest is linear:
           Δ ≈ (x'_P − x_P) · ∂m/∂resid_mid_P (the residual path) + Σ_t Δcore_t · ∂m/∂core_out_t. For
           one position per example, in closed form for every position at once (`attention_every`:
           O(T² d) per site, like one attention pass); for several, one attention per cell.
tail       the last block's position-wise part (`mixer_out` … `resid_post` of the last layer): its cells
           change the answer only where they sit at an answer position, through the MLP, the final norm and
           the head, all position-wise, so they are patched exactly there (`engine`'s narrow tail pass:
           one position-wise pass per cell at the answer positions, no extra forward pass).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from mecheval.interventions.engine import TOKEN_BUDGET, Cell, _applied, _from_finish, _in_tail, answer_scores
from mecheval.models.lm import LM, Block
from mecheval.models.mixers.attention import Attention
from mecheval.models.sites import attach

CORRECTIONS = ("answer", "attention", "tail")


def parse_correction(correction: str | Sequence[str]) -> tuple[str, ...]:
    """"all" (every correction), "none", or names among CORRECTIONS (a sequence or comma-separated)."""
    if isinstance(correction, str):
        correction = {"all": CORRECTIONS, "none": ()}.get(correction, correction.split(","))
    names = tuple(dict.fromkeys(c.strip() for c in correction if c.strip()))
    unknown = [c for c in names if c not in CORRECTIONS]
    if unknown:
        raise ValueError(f"correction must be 'all', 'none' or among {list(CORRECTIONS)}, got {unknown}")
    return names


def answer_margins(logits: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """logits [N, Q, V], answer [N, Q] -> μ [N, Q]: the answer's logit minus the logsumexp of all the others
    (σ(μ) is the answer's probability)."""
    logits = logits.float()
    logit = logits.gather(-1, answer[..., None])[..., 0]
    others = logits.scatter(-1, answer[..., None], float("-inf"))
    return logit - others.logsumexp(-1)


def attention_target(lm: LM, cell: Cell) -> tuple[int, str] | None:
    """(layer, how) of the attention whose queries and keys a cell moves directly at its own positions, or
    None. how: "mixer_in" (that layer's `mixer_in`), "resid_pre" (its `resid_pre`), "finish" (a site of the
    position-wise part of the layer before, `Block.FINISH_SITES`) or "core" (`core_out` of an attention
    layer before it, which reaches the residual through the linear output projection only)."""
    layer, kind = cell.layer, cell.kind
    how = {"mixer_in": "mixer_in", "resid_pre": "resid_pre", "core_out": "core", **dict.fromkeys(Block.FINISH_SITES, "finish"),
           "resid_post": "resid_post"}.get(kind)
    if how in ("finish", "core", "resid_post"):
        layer += 1
    if how is None or layer >= len(lm.layers) or type(lm.layers[layer].mixer) is not Attention:
        return None
    if how == "core" and type(lm.layers[layer - 1].mixer) is not Attention:
        return None
    return layer, "resid_pre" if how == "resid_post" else how  # the block before's output is this one's input


def attention_layer(site: str, how: str) -> int:
    """The attention layer a cell at `site` feeds (`attention_target` gave `how`)."""
    cell = Cell(site, "")
    return cell.layer + (how in ("finish", "core") or cell.kind == "resid_post")


def attention_sites(layer: int, how: str) -> list[str]:
    """The sites whose values `attention_inputs` reads for a cell `attention_target` gave (layer, how)."""
    names = [f"layers.{layer}.{k}" for k in ("resid_pre", "mixer_in", "resid_mid", "core_out")]
    return names + [f"layers.{layer - 1}.{k}" for k in ("resid_pre", "mixer_out")] * (how in ("finish", "core"))


def attention_inputs(
    lm: LM, site: str, how: str, pos: torch.Tensor | None, base, source
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The patched run's values at the positions pos [B, K] (None: every position, each patched alone) of
    the attention layer's input (`resid_pre`; None for a `mixer_in` cell, which bypasses the residual) and
    of its `mixer_in`: [B, K or T, D] each, exact (the block before runs position-wise there), for a cell
    at `site` that `attention_target` gave `how`. base, source: site name -> [B, T, D] (`attention_sites`)."""
    layer = attention_layer(site, how)

    def at(x: torch.Tensor) -> torch.Tensor:
        return x if pos is None else x[torch.arange(pos.shape[0], device=pos.device)[:, None], pos]

    if how == "mixer_in":
        return None, at(source[site])
    if how == "resid_pre":
        x = at(source[site])
    else:
        before = lm.layers[layer - 1]
        x, m = (at(base[f"layers.{layer - 1}.{k}"]) for k in ("resid_pre", "mixer_out"))
        if how == "core":
            x = before.finish(x, before.mixer.out(at(source[site])))
        else:
            with attach(lm.sites(), {site: lambda _, v=at(source[site]): v}):
                x = before.finish(x, m)
    return x, lm.layers[layer].norm1(x)


def attention_every(mixer: Attention, u_base: torch.Tensor, g_core: Sequence[torch.Tensor]):
    """A function u_new [B, T, D] -> one [B, T] per g [B, T, D] in `g_core`: for every position t at once,
    Σ_s (core'_s − core_s) · g_s where core' is the attention with its input (`mixer_in`) at t alone set to
    u_new[:, t], in closed form (the base run's parts computed once, here).

    With logits l = q·k/√d_h, the row of a later query s changes in column t only (k_t, v_t move):
        core'_s · g_s = (Σ_{j≠t} e^{l_sj} v_j·g_s + e^{l'_st} v'_t·g_s) / (Σ_{j≠t} e^{l_sj} + e^{l'_st}),
    the sums over j ≠ t as exclusive prefix + suffix sums (no cancellation where row s sits on t), and row t
    is recomputed with q'_t against the keys before it and k'_t: O(S T d) per head for all t, S the rows
    where some g is non-zero (in the last layer, the answer positions)."""
    B, T, D = u_base.shape
    rows = torch.stack(list(g_core)).ne(0).any(0).any(0).any(-1).nonzero()[:, 0]  # [S]: the rows that matter
    q, k, v = (mixer._heads(z) for z in mixer.qkv(u_base).split(D, dim=-1))  # [B, H, T, d_h]
    q = q[:, :, rows]
    scale = q.shape[-1] ** -0.5
    cols = torch.arange(T, device=u_base.device)
    causal, later = cols <= rows[:, None], cols < rows[:, None]  # [S, T]
    own_col = cols == rows[:, None]  # [S, T]: row s's own column
    logits = (q @ k.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))  # [B, H, S, T]
    shift = logits.amax(-1, keepdim=True)
    e = (logits - shift).exp()
    rest = _without_each(e)  # [B, H, S, t]: Σ_{j≠t} e_sj (relative to the row's max)
    core = e @ v / e.sum(-1, keepdim=True)  # [B, H, S, d_h]
    g_heads = [mixer._heads(g)[:, :, rows] for g in g_core]  # [B, H, S, d_h] each
    base = [(_without_each(e * (g @ v.transpose(-1, -2))), (core * g).sum(-1, keepdim=True)) for g in g_heads]

    def every(u_new: torch.Tensor) -> list[torch.Tensor]:
        q1, k1, v1 = (mixer._heads(z) for z in mixer.qkv(u_new).split(D, dim=-1))
        moved = (q @ k1.transpose(-1, -2) * scale - shift).masked_fill(~later, float("-inf"))  # l'_st − max_j l_sj
        over = moved.clamp_min(0)  # divide both sums by e^over: no overflow where the moved key wins the row
        e1, damp = (moved - over).exp(), (-over).exp()
        q1, k1_own, v1_own = q1[:, :, rows], k1[:, :, rows], v1[:, :, rows]
        own = (q1 @ k.transpose(-1, -2) * scale).masked_fill(own_col, 0)
        own = own + own_col * ((q1 * k1_own).sum(-1, keepdim=True) * scale)  # row s: q'_s against k_j (j < s), k'_s
        w = own.masked_fill(~causal, float("-inf")).softmax(-1)
        core_own = w.masked_fill(own_col, 0) @ v + (w * own_col).sum(-1, keepdim=True) * v1_own  # [B, H, S, d_h]
        denom = (rest * damp + e1).clamp_min(torch.finfo(e.dtype).tiny)
        same = (u_new == u_base).all(-1)  # [B, T]: nothing moves
        out = []
        for g, (rest_vg, cg) in zip(g_heads, base):
            later_rows = (rest_vg * damp + e1 * (g @ v1.transpose(-1, -2))) / denom - cg  # [B, H, S, t]
            change = later_rows.masked_fill(~later, 0).sum(-2)  # [B, H, T]
            change = change.index_add(-1, rows, ((core_own - core) * g).sum(-1))
            out.append(change.sum(1).masked_fill(same, 0))
        return out

    return every


def _without_each(x: torch.Tensor) -> torch.Tensor:
    """[..., J] -> [..., J]: entry t is Σ_{j≠t} x_j, as the sum of the exclusive prefix and suffix sums."""
    prefix = F.pad(x.cumsum(-1)[..., :-1], (1, 0))
    suffix = F.pad(x.flip(-1).cumsum(-1)[..., :-1], (1, 0)).flip(-1)
    return prefix + suffix


def attention_changes(
    mixer: Attention, u_base: torch.Tensor, positions: Sequence[torch.Tensor], values: Sequence[torch.Tensor],
    g_core: Sequence[torch.Tensor],
) -> list[torch.Tensor]:
    """Σ_t (core'_t − core_t) · g_t for each cell and each gradient g [B, T, D] in `g_core`: [C, B] each.

    u_base: the attention's input (site `mixer_in`) [B, T, D]; core' is the attention with the input at the
    cell's positions positions[c] [B, K] set to values[c] [B, K, D]: one attention per cell, for cells of
    several positions (`attention_every` takes those of one)."""
    B, T, D = u_base.shape
    rows = torch.arange(B, device=u_base.device)[:, None]
    qkv_base = mixer.qkv(u_base)  # [B, T, 3D]
    core_base = mixer.core(qkv_base)
    step = max(1, TOKEN_BUDGET // (B * T))
    out: list[list[torch.Tensor]] = [[] for _ in g_core]
    for lo in range(0, len(positions), step):
        part = list(zip(positions[lo : lo + step], values[lo : lo + step]))
        qkv = qkv_base.repeat(len(part), 1, 1).view(-1, B, T, 3 * D)
        for i, (pos, v) in enumerate(part):
            qkv[i, rows, pos] = mixer.qkv(v)
        change = mixer.core(qkv.flatten(0, 1)).view(-1, B, T, D) - core_base
        for o, g in zip(out, g_core):
            o.append((change * g).sum((-1, -2)))
    return [torch.cat(o) for o in out]


def in_tail(lm: LM, cell: Cell) -> bool:
    """The cell is in the last block's position-wise part (the `tail` correction patches it exactly)."""
    last = len(lm.layers) - 1
    return _in_tail(_applied(cell, last), last)


def tail_sites(lm: LM) -> list[str]:
    """The base run's sites `tail_scores` reads."""
    return [f"layers.{len(lm.layers) - 1}.{k}" for k in ("resid_pre", "mixer_out")]


def tail_scores(lm: LM, cells: Sequence[Cell], where, base, source, answer: torch.Tensor, answer_pos: torch.Tensor):
    """Exact (p, logit) [C, B] of cells in the last block's position-wise part: that part, the final norm and
    the head run at the answer positions [B, Q] only, with each cell's source values [B, K, D] where its
    positions meet them; and where they do (bool [C, B]: elsewhere the patched run is the base run).
    base, source: site name -> [B, T, D] (`tail_sites`, the cells' sites)."""
    last = len(lm.layers) - 1
    acts = {f"resid{last}": base[f"layers.{last}.resid_pre"], f"mixed{last}": base[f"layers.{last}.mixer_out"]}
    hit = torch.stack([(where[c.position][:, :, None] == answer_pos[:, None, :]).flatten(1).any(1) for c in cells])  # [C, B]
    ex = [h.nonzero()[:, 0] for h in hit]  # only the examples whose patch meets an answer position run
    tiles = [(c, where[c.position][e], source[c.site][e[:, None], where[c.position][e]]) for c, e in zip(cells, ex)]
    flat = torch.cat(ex)
    p, logit = answer_scores(_from_finish(lm, last, acts, flat, tiles, answer_pos[flat]), answer[flat])
    p_all, logit_all = p.new_zeros(hit.shape), logit.new_zeros(hit.shape)
    p_all[hit], logit_all[hit] = p, logit
    return p_all, logit_all, hit
