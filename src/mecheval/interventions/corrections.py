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
           one position per example, in closed form for every position at once (`attention_every`: O(S T d),
           S the rows the metric reads, once per distinct input to the layer, with both runs' q, k, v
           recorded in their forward passes); for several, the layer runs once per distinct input and
           positions, as in `mixer`.
tail       the last block's position-wise part (`mixer_out` … `resid_post` of the last layer): its cells
           change the answer only where they sit at an answer position, through the MLP, the final norm and
           the head, all position-wise, so they are patched exactly there: one position-wise pass per site
           at the answer positions (`tail_scores`), no extra forward pass.
mixer      a recurrent or convolutional mixer's gates and Δ's softplus. For a cell that moves the input of
           a mixer other than attention (the same cells as for attention: `feeding_target`), that mixer runs
           exactly on the patched run's input, once per distinct input and set of positions, and the rest
           is linear: Δ ≈ Σ_t (y'_t − y_t + x'_t − x_t) · ∂m/∂resid_mid_t (`mixer_estimates`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from mecheval.interventions.engine import TOKEN_BUDGET, Cell, _applied, _in_tail
from mecheval.models.lm import LM, Block
from mecheval.models.mixers.attention import Attention
from mecheval.models.sites import attach

CORRECTIONS = ("answer", "attention", "tail", "mixer")
DEFAULT = ("answer", "attention", "tail")  # "all": `mixer` costs more than the estimate is for (opt-in: "all,mixer")


def parse_correction(correction: str | Sequence[str]) -> tuple[str, ...]:
    """"all" (the corrections in DEFAULT, `method="gradient"`'s default), "none", or names among CORRECTIONS
    and "all" (a sequence or comma-separated: "all,mixer" is every correction)."""
    if isinstance(correction, str):
        correction = () if correction == "none" else correction.split(",")
    names = [c.strip() for c in correction if c.strip()]
    names = tuple(dict.fromkeys(n for c in names for n in (DEFAULT if c == "all" else (c,))))
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


# how (`feeding_target`) -> the name of the mixer input it gives: `resid_pre` and `mixer_in` cells both give
# the source run's, so the mixer runs once for both
SHARED_INPUT = {"resid_pre": "source", "mixer_in": "source"}


def feeding_target(lm: LM, cell: Cell) -> tuple[int, str] | None:
    """(layer, how) of the mixer whose input a cell moves directly at its own positions, or None. how names
    the patched run's input to that layer (`patched_inputs`), the same for cells that give the same input:
    "mixer_in" (that layer's `mixer_in`: the residual keeps its value), "resid_pre" (its `resid_pre`, or
    the block before's `resid_post` or `resid_mid`: the block before is position-wise after resid_mid, so
    the input is the source run's), "mixer_out" (the block before's `mixer_out`, or its `core_out` if that
    block is attention: the output projection is linear and position-wise) or "mlp_out" (the block
    before's `mlp_out`: added to the residual)."""
    layer, kind = cell.layer, cell.kind
    how = {"mixer_in": "mixer_in", "resid_pre": "resid_pre"}.get(kind)
    if how is None:
        layer += 1  # a site of the block before the mixer
        how = {"resid_post": "resid_pre", "resid_mid": "resid_pre", "mixer_out": "mixer_out", "mlp_out": "mlp_out",
               "core_out": "mixer_out"}.get(kind)
    if how is None or layer >= len(lm.layers):
        return None
    if kind == "core_out" and type(lm.layers[layer - 1].mixer) is not Attention:
        return None
    return layer, how


def attention_target(lm: LM, cell: Cell) -> tuple[int, str] | None:
    """`feeding_target` where that mixer is attention (the `attention` correction's cells), else None."""
    target = feeding_target(lm, cell)
    return target if target is not None and type(lm.layers[target[0]].mixer) is Attention else None


def mixer_target(lm: LM, cell: Cell) -> tuple[int, str] | None:
    """`feeding_target` where that mixer is not attention (the `mixer` correction's cells), else None; None in
    a wrapped `transformers` model too (`mecheval.hf`: its blocks have no `resid_mid` site to read)."""
    target = feeding_target(lm, cell)
    if target is None or not isinstance(block := lm.layers[target[0]], Block):
        return None
    return target if type(block.mixer) is not Attention else None


def input_sites(layer: int, how: str) -> list[str]:
    """The sites whose values `patched_inputs` reads for (layer, how) of `feeding_target`, and the layer's
    resid_mid (whose gradient the corrections read)."""
    before = {"mixer_out": ("resid_pre", "mixer_out"), "mlp_out": ("resid_mid", "mlp_out")}.get(how, ())
    return [f"layers.{layer}.{k}" for k in ("resid_pre", "mixer_in", "resid_mid")] + [
        f"layers.{layer - 1}.{k}" for k in before]


def attention_sites(layer: int, how: str) -> list[str]:
    """The sites the `attention` correction reads for (layer, how) of `attention_target` (`mixer_sites` and
    core_out)."""
    return [*mixer_sites(layer, how), f"layers.{layer}.core_out"]


def mixer_sites(layer: int, how: str) -> list[str]:
    """The sites the `mixer` correction reads for (layer, how) of `mixer_target`."""
    return [*input_sites(layer, how), f"layers.{layer}.mixer_out"]


def patched_inputs(
    lm: LM, layer: int, how: str, pos: torch.Tensor | None, base, source
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The patched run's values at the positions pos [B, K] (None: every position, each patched alone) of
    layer `layer`'s input (`resid_pre`; None for "mixer_in", which bypasses the residual) and of its
    `mixer_in`: [B, K or T, D] each, exact (the block before runs position-wise there), for a cell that
    `feeding_target` gave (layer, how). base, source: site name -> [B, T, D] (`input_sites`)."""

    def at(name: str, acts) -> torch.Tensor:
        x = acts[f"layers.{name}"]
        return x if pos is None else x[torch.arange(pos.shape[0], device=pos.device)[:, None], pos]

    if how == "mixer_in":
        return None, at(f"{layer}.mixer_in", source)
    if how == "resid_pre":
        return at(f"{layer}.resid_pre", source), at(f"{layer}.mixer_in", source)
    if how == "mlp_out":
        x = at(f"{layer - 1}.resid_mid", base) + at(f"{layer - 1}.mlp_out", source)
    else:
        x = lm.layers[layer - 1].finish(at(f"{layer - 1}.resid_pre", base), at(f"{layer - 1}.mixer_out", source))
    return x, lm.layers[layer].norm1(x)


def projections(lm: LM, layers: Sequence[int]) -> dict[str, torch.nn.Module]:
    """The q, k, v projections (`Attention.qkv`) of attention layers `layers`, by name `layers.{i}.qkv`: recorded
    beside the sites in both runs, so that the correction reuses their q, k, v ([B, T, 3D]) instead of
    projecting again."""
    return {f"layers.{i}.qkv": lm.layers[i].mixer.qkv for i in layers}


def attention_estimates(
    lm: LM, layer: int, hows: Sequence[str], keys: Sequence[str], where, base, source, grad
) -> torch.Tensor:
    """The corrected first-order changes [C, M, B] of the cells feeding attention layer `layer`: cell c is
    (hows[c] of `attention_target`, its positions where[keys[c]] [B, K]). base, source: name -> [B, T, ...]
    (`attention_sites`, `projections`); grad: name -> the metrics' gradients [M, B, T, D].

    Cells of one position per example read one closed form per distinct input to the layer
    (`attention_every`, all at once: `resid_pre` and `mixer_in` cells share the source run's); cells of several
    positions run the layer once per distinct input, as any mixer (`mixer_estimates`). The residual path
    adds (x'_P − x_P) · ∂m/∂resid_mid_P."""
    positions = [where[k] for k in keys]
    mixer, name = lm.layers[layer].mixer, f"layers.{layer}"
    u_base, x_base, g_mid = base[f"{name}.mixer_in"], base[f"{name}.resid_pre"], grad[f"{name}.resid_mid"]
    out = g_mid.new_empty(len(hows), *g_mid.shape[:2])  # [C, M, B]
    multi = [c for c, pos in enumerate(positions) if pos.shape[1] > 1]
    single = [c for c, pos in enumerate(positions) if pos.shape[1] == 1]
    residual, inputs = {}, {}  # how -> the layer's input x' (None: mixer_in); the distinct mixer inputs u'
    for how in dict.fromkeys(hows[c] for c in single):
        residual[how], u = patched_inputs(lm, layer, how, None, base, source)
        inputs.setdefault(SHARED_INPUT.get(how, how), u)
    if inputs:  # every position patched alone, for every distinct input at once: [K, M, B, T]
        recorded = [source[f"{name}.qkv"] if k == "source" else None for k in inputs]
        moved = dict(zip(inputs, attention_every(mixer, u_base, grad[f"{name}.core_out"], base[f"{name}.qkv"])(
            torch.stack(list(inputs.values())), None if None in recorded else torch.stack(recorded))))
    for how, x in residual.items():  # then each cell's
        every = moved[SHARED_INPUT.get(how, how)]  # [M, B, T]
        every = every if x is None else every + ((x - x_base) * g_mid).sum(-1)
        group = [c for c in single if hows[c] == how]
        at = torch.cat([positions[c] for c in group], 1)  # [B, cells]
        out[group] = every.gather(-1, at.expand(len(every), -1, -1)).permute(2, 0, 1)
    if multi:
        out[multi] = mixer_estimates(lm, layer, [hows[c] for c in multi], [keys[c] for c in multi], where, base, source, grad)
    return out


def attention_every(mixer: Attention, u_base: torch.Tensor, g_core: torch.Tensor, qkv_base: torch.Tensor | None = None):
    """A function (u_new [..., B, T, D], its q, k, v [..., B, T, 3D] or None: projected here) -> [..., M, B, T]: for every
    position t at once and every gradient g [B, T, D] in `g_core` [M, B, T, D], Σ_s (core'_s − core_s) · g_s
    where core' is the attention with its input (`mixer_in`) at t alone set to u_new[:, t], in closed form
    (the base run's parts computed once, here; qkv_base: the base run's q, k, v, or None). Where g is zero
    on most rows (the last layer), u_new is projected at the rows S only and the moved keys and values
    are read as u'_t · W_k^T q_s and u'_t · W_v^T g_s (qkv_new is not needed there).

    With logits l = q·k/√d_h, the row of a later query s changes in column t only (k_t, v_t move):
        core'_s · g_s = (Σ_{j≠t} e^{l_sj} v_j·g_s + e^{l'_st} v'_t·g_s) / (Σ_{j≠t} e^{l_sj} + e^{l'_st}),
    the sums over j ≠ t as exclusive prefix + suffix sums (no cancellation where row s sits on t), and row t
    is recomputed with q'_t against the keys before it and k'_t: O(S T d) per head for all t, S the rows
    where some g is non-zero (in the last layer, the answer positions)."""
    B, T, D = u_base.shape
    rows = g_core.abs().amax((0, 1, 3)).nonzero()[:, 0]  # [S]: the rows that matter
    few = len(rows) < T  # e.g. the last layer: moved keys and values are read through W_k, W_v

    def pick(z: torch.Tensor, dim: int) -> torch.Tensor:  # the rows that matter along `dim`
        return z.index_select(dim, rows) if few else z

    def split(z: torch.Tensor) -> torch.Tensor:  # [..., T, D] -> [..., H, T, d_h]
        return z.unflatten(-1, (mixer.n_heads, -1)).transpose(-2, -3)

    def heads(qkv: torch.Tensor) -> list[torch.Tensor]:  # [..., T, 3D] -> q, k, v [..., H, T, d_h]
        return [split(z) for z in qkv.split(D, dim=-1)]

    q, k, v = heads(mixer.qkv(u_base) if qkv_base is None else qkv_base)
    q = pick(q, 2)
    scale = q.shape[-1] ** -0.5
    cols = torch.arange(T, device=u_base.device)
    causal, later = cols <= rows[:, None], cols < rows[:, None]  # [S, T]
    own_col = cols == rows[:, None]  # [S, T]: row s's own column
    logits = (q @ k.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))  # [B, H, S, T]
    shift = logits.amax(-1, keepdim=True)
    e = (logits - shift).exp()
    rest = _without_each(e)  # [B, H, S, t]: Σ_{j≠t} e_sj (relative to the row's max)
    core = e @ v / e.sum(-1, keepdim=True)  # [B, H, S, d_h]
    g = split(pick(g_core, 2))  # [M, B, H, S, d_h]
    rest_vg, core_g = _without_each(e * (g @ v.transpose(-1, -2))), (core * g).sum(-1, keepdim=True)
    if few:  # q_s · k'_t = (W_k^T q_s) · u'_t and g_s · v'_t = (W_v^T g_s) · u'_t, per head (qkv has no bias)
        w_k, w_v = (mixer.qkv.weight[i * D : (i + 1) * D].view(mixer.n_heads, -1, D) for i in (1, 2))  # [H, d_h, D]
        q_k, g_v = q @ w_k, g @ w_v  # [B, H, S, D], [M, B, H, S, D]

    def every(u_new: torch.Tensor, qkv_new: torch.Tensor | None = None) -> torch.Tensor:
        # u_new [..., B, T, D] -> [..., M, B, T]; below, "..." is left out of the shapes
        if few:  # project the rows only (every input the same way: equal inputs give equal changes)
            q1, k1_own, v1_own = heads(mixer.qkv(u_new.index_select(-2, rows)))  # [B, H, S, d_h]
            u_t = u_new.transpose(-1, -2).unsqueeze(-3)  # [B, 1, D, T]
            qk1, gv1 = q_k @ u_t, g_v @ u_t.unsqueeze(-5)  # [B, H, S, T], [M, B, H, S, T]
        else:
            q1, k1, v1 = heads(mixer.qkv(u_new) if qkv_new is None else qkv_new)
            qk1, gv1 = q @ k1.transpose(-1, -2), g @ v1.transpose(-1, -2).unsqueeze(-5)
            q1, k1_own, v1_own = pick(q1, -2), pick(k1, -2), pick(v1, -2)
        moved = (qk1 * scale - shift).masked_fill(~later, float("-inf"))  # l'_st − max_j l_sj
        over = moved.clamp_min(0)  # divide both sums by e^over: no overflow where the moved key wins the row
        e1, damp = (moved - over).exp(), (-over).exp()
        own = (q1 @ k.transpose(-1, -2) * scale).masked_fill(own_col, 0)
        own = own + own_col * ((q1 * k1_own).sum(-1, keepdim=True) * scale)  # row s: q'_s against k_j (j < s), k'_s
        w = own.masked_fill(~causal, float("-inf")).softmax(-1)
        core_own = w.masked_fill(own_col, 0) @ v + (w * own_col).sum(-1, keepdim=True) * v1_own  # [B, H, S, d_h]
        denom = (rest * damp + e1).clamp_min(torch.finfo(e.dtype).tiny).unsqueeze(-5)
        later_rows = (rest_vg * damp.unsqueeze(-5) + e1.unsqueeze(-5) * gv1) / denom - core_g  # [M, B, H, S, t]
        change = later_rows.masked_fill(~later, 0).sum(-2)  # [M, B, H, T]
        change = change.index_add(-1, rows, ((core_own.unsqueeze(-5) - core) * g).sum(-1))
        same = (u_new - u_base).abs().amax(-1) == 0  # [B, T]: nothing moves where the input is the same
        return change.sum(-2).masked_fill(same.unsqueeze(-3), 0)

    return every


def _without_each(x: torch.Tensor) -> torch.Tensor:
    """[..., J] -> [..., J]: entry t is Σ_{j≠t} x_j, as the sum of the exclusive prefix and suffix sums."""
    prefix = F.pad(x.cumsum(-1)[..., :-1], (1, 0))
    suffix = F.pad(x.flip(-1).cumsum(-1)[..., :-1], (1, 0)).flip(-1)
    return prefix + suffix


def mixer_estimates(
    lm: LM, layer: int, hows: Sequence[str], keys: Sequence[str], where, base, source, grad
) -> torch.Tensor:
    """The corrected first-order changes [C, M, B] of the cells feeding the mixer of layer `layer` (the
    `mixer` correction; attention's cells of several positions): cell c is (hows[c] of `feeding_target`, its
    positions where[keys[c]] [B, K]). base, source: name -> [B, T, D] (`mixer_sites`); grad: name -> the
    metrics' gradients [M, B, T, D].

    The mixer runs exactly on the patched run's input (`patched_inputs` at the cell's positions, the base
    run's elsewhere), once per distinct input and positions (`resid_pre` and `mixer_in` cells share the
    source run's) and only for the examples whose input moves, many in one call (TOKEN_BUDGET rows);
    downstream of its output everything is linear: Δ ≈ Σ_t (y'_t − y_t + x'_t − x_t) · ∂m/∂resid_mid_t
    (resid_mid = x + y: the mixer's output y and the residual path read the same gradient)."""
    mixer, name = lm.layers[layer].mixer, f"layers.{layer}"
    u_base, x_base, y_base = (base[f"{name}.{k}"] for k in ("mixer_in", "resid_pre", "mixer_out"))
    g_mid = grad[f"{name}.resid_mid"]  # [M, B, T, D]
    B, T, _ = u_base.shape
    rows = torch.arange(B, device=u_base.device)[:, None]
    distinct = list(dict.fromkeys(zip(hows, keys)))  # (how, positions): the residual path's change
    run_of = {d: i for i, d in enumerate(dict.fromkeys((SHARED_INPUT.get(how, how), key) for how, key in distinct))}
    residual = g_mid.new_zeros(len(distinct), *g_mid.shape[:2])  # [C', M, B]
    moved = g_mid.new_zeros(len(run_of), *g_mid.shape[:2])  # [R, M, B]: the mixer's change, per distinct input

    def flush(tiles) -> None:  # tiles: (run, examples [n], the mixer's patched input [n, T, D]), in one call
        examples = torch.cat([e for _, e, _ in tiles])
        change = mixer(torch.cat([u for _, _, u in tiles])) - y_base[examples]  # [n, T, D]
        dots = (change * g_mid[:, examples]).sum((-1, -2))  # [M, n]
        for (r, e, _), d in zip(tiles, dots.split([len(e) for _, e, _ in tiles], -1)):
            moved[r, :, e] = d

    tiles, size, done = [], 0, set()
    for c, (how, key) in enumerate(distinct):
        pos, r = where[key], run_of[SHARED_INPUT.get(how, how), key]
        x, u = patched_inputs(lm, layer, how, pos, base, source)  # [B, K, D]
        if x is not None:
            residual[c] = ((x - x_base[rows, pos]) * g_mid[:, rows, pos]).sum((-1, -2))
        active = (u != u_base[rows, pos]).flatten(1).any(-1).nonzero()[:, 0]  # the examples whose input moves
        if r not in done and len(active):
            patched = u_base[active].clone()
            patched[torch.arange(len(active), device=active.device)[:, None], pos[active]] = u[active]
            tiles.append((r, active, patched))
            size += len(active) * T
        done.add(r)
        if tiles and (size >= TOKEN_BUDGET or c == len(distinct) - 1):
            flush(tiles)
            tiles, size = [], 0
    cell = {d: i for i, d in enumerate(distinct)}
    return moved[[run_of[SHARED_INPUT.get(h, h), k] for h, k in zip(hows, keys)]] + residual[[cell[d] for d in zip(hows, keys)]]


class Feeding(NamedTuple):
    """A correction of the cells that feed a mixer: which cells (`target`: (layer, how) or None), the sites it
    reads for one (`sites`), the gradients it reads at that layer (`grads`), and its estimates [C, M, B]."""

    target: Callable[[LM, Cell], tuple[int, str] | None]
    sites: Callable[[int, str], list[str]]
    grads: tuple[str, ...]
    estimates: Callable[..., torch.Tensor]


FEEDING = {"attention": Feeding(attention_target, attention_sites, ("resid_mid", "core_out"), attention_estimates),
           "mixer": Feeding(mixer_target, mixer_sites, ("resid_mid",), mixer_estimates)}


def in_tail(lm: LM, cell: Cell) -> bool:
    """The cell is in the last block's position-wise part (the `tail` correction patches it exactly)."""
    last = len(lm.layers) - 1
    return _in_tail(_applied(cell, last), last)


def tail_sites(lm: LM) -> list[str]:
    """The base run's sites `tail_scores` reads."""
    return [f"layers.{len(lm.layers) - 1}.{k}" for k in ("resid_pre", "mixer_out")]


def tail_scores(lm: LM, cells: Sequence[Cell], where, base, source, answer: torch.Tensor, answer_pos: torch.Tensor):
    """Exact (p, logit) [C, B] of cells in the last block's position-wise part, and where their positions meet
    an answer position (bool [C, B]: elsewhere the patched run is the base run). That part, the final norm and
    the head are position-wise, so an answer position's score moves only if that position is patched: they
    run once per site at the answer positions [B, Q] with the source's values there, and each cell takes,
    per answer position, that score or the base run's. base, source: site name -> [B, T, D] (`tail_sites`,
    the cells' sites)."""
    last = lm.layers[-1]
    rows = torch.arange(answer_pos.shape[0], device=answer_pos.device)[:, None]
    x, m = (base[f"layers.{len(lm.layers) - 1}.{k}"][rows, answer_pos] for k in ("resid_pre", "mixer_out"))  # [B, Q, D]

    def scores(fns) -> torch.Tensor:  # (p, logit) at each answer position: [2, B, Q]
        with attach(lm.sites(), fns):
            logits = lm.unembed(last.finish(x, m)).float()
        logit = logits.gather(-1, answer[..., None])[..., 0]
        return torch.stack([(logit - logits.logsumexp(-1)).exp(), logit])

    sites = {n: i for i, n in enumerate(dict.fromkeys(c.site for c in cells))}
    keys = {k: i for i, k in enumerate(dict.fromkeys(c.position for c in cells))}
    patched = torch.stack([scores({n: lambda _, v=source[n][rows, answer_pos]: v}) for n in sites])  # [N, 2, B, Q]
    meets = torch.stack([(where[k][:, :, None] == answer_pos[:, None, :]).any(1) for k in keys])  # [P, B, Q]
    hit = meets[[keys[c.position] for c in cells]]  # [C, B, Q]
    out = torch.where(hit[:, None], patched[[sites[c.site] for c in cells]], scores({})).mean(-1)  # [C, 2, B]
    return out[:, 0], out[:, 1], hit.any(-1)
