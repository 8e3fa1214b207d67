"""Interchange experiments on a task batch -> tidy DataFrames (one row per cell, or per cell × example)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np
import pandas as pd
import torch

from mecheval.common import N_EXAMPLES  # noqa: F401  (re-exported: examples per readout, the CLI's default)
from mecheval.interventions.artefact import subsets as artefact_subsets
from mecheval.interventions.corrections import parse_correction
from mecheval.interventions.engine import Cell, patch_cells, resolve_sites
from mecheval.interventions.gradient import gradient_cells
from mecheval.interventions.metrics import DIRECTIONS, attribution, bootstrap_attribution, bootstrap_difference
from mecheval.interventions.positions import Position, default, keys_as_column, resolve
from mecheval.models.lm import LM
from mecheval.models.states import StateSite
from mecheval.tasks import Batch, Task, length_groups

LENGTH_GROUPS = 4  # default length groups of an intervention batch (ATR pads to ~3x its tokens; AR stays one group)
Subsets = Mapping[str, torch.Tensor] | str | None
METHODS = {"exact": patch_cells, "gradient": gradient_cells}  # exact patching; attribution patching (estimate)


def interchange(
    lm: LM,
    task: Task,
    batch: Batch,
    corrupt: str,
    sites: Sequence[str],
    positions: Sequence[Position] | None = None,
    *,
    seed: int = 0,
    per_example: bool = False,
    direction: str = "sufficiency",
    chunk: int | None = None,
    n_boot: int = 1000,
    subsets: Subsets = "artefact",
    method: str = "exact",
    length_groups: int = LENGTH_GROUPS,
    correction: str | Sequence[str] = "all",
    verify: int = 0,
) -> pd.DataFrame:
    """Patch each (site, position) cell between `batch` and `task.corrupt(batch, corrupt, seed)`.

    sites: names or globs (`layers.*.resid_pre`, or a bare kind `resid_pre`). positions: specs of
    `positions.py`: role names (`query`), role offsets (`key+3`, `value-1`), integers, joined with "&"
    to patch together (`key&query`); default: every role and `key&query` (what the verdict reads).
    direction "sufficiency" runs the corrupted input with the clean activation patched in, "necessity"
    the reverse. Returns one row per (subset, layer, site, position) with `p_clean`, `p_corrupt`,
    `p_patched` (means over examples), `attrib` with its bootstrap interval `attrib_lo`/`attrib_hi` (95%,
    `n_boot` resamples), the same for logits (`logit_*`), the effect's interval `effect_lo`/`effect_hi`
    and `n`; `per_example=True` returns one row per cell × example (column `example`) without attributions.
    subsets: "artefact" (default, as `mecheval intervene`): rows for `all`, `outside` and `inside` the conv
    reach (`artefact.subsets`; `mechanism` reads `outside`); a mapping name -> bool mask [B]; or None: `all` only.
    method: "exact" (one patched run per cell) or "gradient" (attribution patching: every cell's
    first-order estimate from one forward per input and one backward; `gradient.gradient_cells`);
    the column `method` says which; `correction` names its AtP* corrections ("all", "none", "all,mixer", …:
    `gradient.gradient_cells`) and `verify=K` patches the K cells with the highest estimated attribution
    (over the whole batch) exactly (`verify_cells`). A gradient table adds `verified` (the row is exact),
    `attrib_estimate` (the estimate's attribution) and `error_budget` (verified: |exact − estimate|;
    else the gap between the corrected and the plain first-order estimates, NaN with `correction="none"`);
    `verification(df)` summarises the check. length_groups: the examples run in up to that many groups of
    similar length, each at its own length (`tasks.length_groups`; the same scores as one padded batch).
    The defaults are the CLI's: `interchange(lm, task, task.sample(N_EXAMPLES, seed=0, split="test"), "key",
    ["resid_pre"])` and `mechanism` give `mecheval intervene`'s verdict.
    """
    where = resolve(batch, default(batch) if positions is None else list(positions))
    return interchange_at(
        lm, task, batch, corrupt, sites, where, seed=seed, per_example=per_example, direction=direction,
        chunk=chunk, n_boot=n_boot, subsets=subsets, method=method, length_groups=length_groups,
        joint_states=positions is not None, correction=correction, verify=verify,
    )


def patch_all_positions(
    lm: LM,
    task: Task,
    batch: Batch,
    corrupt: str,
    sites: Sequence[str],
    *,
    seed: int = 0,
    per_example: bool = False,
    direction: str = "sufficiency",
    chunk: int | None = None,
    n_boot: int = 1000,
    method: str = "exact",
    subsets: Subsets = None,
    correction: str | Sequence[str] = "all",
    verify: int = 0,
) -> pd.DataFrame:
    """`interchange` at every absolute position 0..T-1 (column `position`: the integer index)."""
    return interchange_at(
        lm, task, batch, corrupt, sites, resolve(batch, range(batch.tokens.shape[1])), seed=seed,
        per_example=per_example, direction=direction, chunk=chunk, n_boot=n_boot, method=method, subsets=subsets,
        correction=correction, verify=verify,
    )


def interchange_at(
    lm: LM,
    task: Task,
    batch: Batch,
    corrupt: str,
    sites: Sequence[str],
    where: Mapping[Position, torch.Tensor],
    *,
    seed: int = 0,
    per_example: bool = False,
    direction: str = "sufficiency",
    chunk: int | None = None,
    n_boot: int = 1000,
    subsets: Subsets = None,
    method: str = "exact",
    length_groups: int = LENGTH_GROUPS,
    joint_states: bool = True,
    correction: str | Sequence[str] = "all",
    verify: int = 0,
) -> pd.DataFrame:
    """`interchange` at arbitrary positions: where[key] = positions [B] (or [B, K], patched together), e.g.
    from `positions.resolve(batch, ["key+1", 5])`; the `position` column holds the keys (integers where
    all are). subsets default None: `all` only. A state site is patched at one position per example:
    joined positions there raise, or, with `joint_states=False` (`interchange`'s default positions), are left out."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    where = dict(zip(keys_as_column(where), where.values()))
    if verify and method != "gradient":
        raise ValueError(f"verify checks the gradient estimate: method must be 'gradient', got {method!r}")
    if verify < 0:
        raise ValueError(f"verify must be >= 0 (cells to patch exactly), got {verify}")
    counter = task.corrupt(batch, corrupt, seed)
    clean, corrupted = batch.tokens, counter.tokens
    base, source = (corrupted, clean) if direction == "sufficiency" else (clean, corrupted)
    states = {n for n, site in lm.sites().items() if isinstance(site, StateSite)}
    cells = [Cell(s, p) for s in resolve_sites(lm, sites) for p in where
             if joint_states or s not in states or where[p].dim() == 1 or where[p].shape[1] == 1]
    was_training = lm.training
    lm.eval()
    try:
        fn = partial(gradient_cells, correction=parse_correction(correction)) if method == "gradient" else patch_cells
        r = _scores_by_length(fn, lm, base, source, cells, where, batch, chunk, length_groups)
        if method == "gradient":
            r["verified"] = verify_cells(r, min(verify, len(cells)), direction, lambda idx: _scores_by_length(
                patch_cells, lm, base, source, [cells[i] for i in idx], where, batch, chunk, length_groups))
    finally:
        lm.train(was_training)
    clean_key, corrupt_key = ("source", "base") if direction == "sufficiency" else ("base", "source")
    scores = {
        f"{m}_{name}": r[f"{m}_{key}"].double().numpy()
        for m in ("p", "logit")
        for name, key in (("clean", clean_key), ("corrupt", corrupt_key))
    }
    for k in ("p_patched", "logit_patched", "p_estimate", "p_linear"):
        if k in r:
            scores[k] = r[k].double().numpy()
    ids = pd.DataFrame(
        {
            "corrupt": corrupt,
            "direction": direction,
            "method": method,
            "n_layers": len(lm.layers),
            "layer": [c.layer for c in cells],
            "site": [c.kind for c in cells],
            "position": [c.position for c in cells],
        }
    )
    if "verified" in r:
        ids["verified"] = r["verified"].numpy()
    if per_example:
        return _per_example(ids, {k: v for k, v in scores.items() if k not in ("p_estimate", "p_linear")})
    if isinstance(subsets, str):
        if subsets != "artefact":
            raise ValueError(f"subsets must be 'artefact', a mapping of masks or None, got {subsets!r}")
        subsets = artefact_subsets(lm, batch)
    subsets = {"all": torch.ones(len(batch), dtype=torch.bool)} if subsets is None else subsets
    parts = []
    for name, mask in subsets.items():
        keep = mask.cpu().numpy().astype(bool)
        if keep.any():
            part = {k: v[..., keep] for k, v in scores.items()}
            parts.append(_summary(ids, part, direction, n_boot, seed, correction).assign(subset=name))
    return pd.concat(parts, ignore_index=True)


def verify_cells(r: dict[str, torch.Tensor], k: int, direction: str, exact) -> torch.Tensor:
    """Replaces in the estimate's scores `r` (`gradient_cells`'s) the k cells with the highest estimated
    attribution (over all examples) by their exact scores, `exact(indices)` (`patch_cells`'s for those
    cells); keeps the estimate as `p_estimate`. Returns which cells are exact: bool [C]."""
    clean, corrupt = ("p_source", "p_base") if direction == "sufficiency" else ("p_base", "p_source")
    estimate = attribution(r["p_patched"].double().mean(1), r[clean].double().mean(), r[corrupt].double().mean(), direction)
    top = torch.as_tensor(np.argsort(-np.nan_to_num(np.asarray(estimate), nan=-np.inf), kind="stable")[:k].copy())
    r["p_estimate"] = r["p_patched"].clone()
    verified = torch.zeros(len(r["p_patched"]), dtype=torch.bool)
    if k:
        e = exact(top.tolist())
        r["p_patched"][top], r["logit_patched"][top] = e["p_patched"], e["logit_patched"]
        verified[top] = True
    return verified


def verification(df: pd.DataFrame) -> pd.DataFrame:
    """The check of a gradient table with verified cells, per (corrupt, direction, subset): `verified` (K),
    `max_error` (the largest |exact − estimate| attribution seen), and `recall_lb`, a lower bound on the
    share of the exact top-K cells that were verified, if no other cell's estimate errs by more than
    `max_error`: a verified cell surely in the top K is outranked by fewer than K cells (the verified ones
    above it, and the others whose estimate + max_error reaches it). Rows whose `verified` is missing (cells
    of another call, not candidates) are left out."""
    rows = []
    for key, g in df[(df["method"] == "gradient") & df["verified"].notna()].groupby(["corrupt", "direction", "subset"], sort=False):
        checked = g["verified"].astype(bool)
        done = g[checked]
        if done.empty:
            continue
        err = (done["attrib"] - done["attrib_estimate"]).abs().max()
        reach = (g.loc[~checked, "attrib_estimate"] + err).to_numpy()
        exact = done["attrib"].to_numpy()
        above = (exact[None, :] > exact[:, None]).sum(1) + (reach[None, :] >= exact[:, None]).sum(1)
        rows.append(dict(zip(("corrupt", "direction", "subset"), key), cells=len(g), verified=len(done),
                         max_error=err, recall_lb=float((above < len(done)).mean())))
    return pd.DataFrame(rows)


def _scores_by_length(fn, lm, base, source, cells, where, batch: Batch, chunk, groups: int) -> dict[str, torch.Tensor]:
    """`fn`'s scores (`engine.patch_cells`'s keys: [B] or [C, B]), computed per length group of `batch`, each
    group cut to its longest sequence (or its last patched position) and the scores put back in row order."""
    parts = []
    for rows in length_groups(batch.lengths, groups):
        sub = {k: v[rows] for k, v in where.items()}
        T = max(int(batch.lengths[rows].max()), *(int(v.max()) + 1 for v in sub.values()))
        r = fn(lm, base[rows, :T], source[rows, :T], cells, sub, batch.answer[rows], batch.answer_pos[rows], chunk=chunk)
        parts.append((rows.cpu(), r))
    out = {k: torch.empty(*v.shape[:-1], len(batch), dtype=v.dtype) for k, v in parts[0][1].items()}
    for rows, r in parts:
        for k, v in r.items():
            out[k][..., rows] = v
    return out


def _summary(ids: pd.DataFrame, s: dict[str, np.ndarray], direction: str, n_boot: int, seed: int, correction) -> pd.DataFrame:
    df = ids.copy()
    df["n"] = s["p_clean"].shape[0]
    for m in ("p", "logit"):
        for k in ("clean", "corrupt"):
            df[f"{m}_{k}"] = s[f"{m}_{k}"].mean()
        df[f"{m}_patched"] = s[f"{m}_patched"].mean(1)
        prefix = "" if m == "p" else "logit_"
        df[f"{prefix}attrib"] = attribution(df[f"{m}_patched"], df[f"{m}_clean"], df[f"{m}_corrupt"], direction)
    df["attrib_lo"], df["attrib_hi"] = bootstrap_attribution(
        s["p_patched"], s["p_clean"], s["p_corrupt"], direction, n_boot=n_boot, seed=seed
    )
    df["effect_lo"], df["effect_hi"] = bootstrap_difference(s["p_clean"], s["p_corrupt"], n_boot=n_boot, seed=seed)
    if "p_linear" in s:  # a gradient table
        attrib = lambda k: attribution(s[k].mean(1), df["p_clean"], df["p_corrupt"], direction)  # noqa: E731
        df["attrib_estimate"] = attrib("p_estimate")
        plain = np.abs(df["attrib_estimate"] - attrib("p_linear"))
        df["error_budget"] = np.where(df["verified"], np.abs(df["attrib"] - df["attrib_estimate"]),
                                      plain if parse_correction(correction) else np.nan)
    return df


def _per_example(ids: pd.DataFrame, s: dict[str, np.ndarray]) -> pd.DataFrame:
    C, B = s["p_patched"].shape
    df = ids.loc[ids.index.repeat(B)].reset_index(drop=True)
    df["example"] = np.tile(np.arange(B), C)
    for m in ("p", "logit"):
        for k in ("clean", "corrupt"):
            df[f"{m}_{k}"] = np.tile(s[f"{m}_{k}"], C)
        df[f"{m}_patched"] = s[f"{m}_patched"].reshape(-1)
    return df
