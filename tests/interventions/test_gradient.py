"""Attribution patching (`method="gradient"`): the first-order estimate of exact patching, checked where
it must be exact, against a finite difference, and against exact patching on small perturbations."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mecheval.interventions import Cell, interchange, patch_cells
from mecheval.interventions.engine import answer_scores
from mecheval.interventions.gradient import gradient_cells
from mecheval.models.mixers import MIXERS
from mecheval.models.sites import attach, record

from .test_engine import random_lm


def test_exact_where_the_logit_is_linear_in_the_site(ar_task):
    """Without the final norm, the answer's logit is linear in the last block's output: the estimate of
    the patched logit is the exact one, at every site of that block's position-wise part and every role."""
    lm = random_lm(ar_task.vocab_size, n_layers=2)
    lm.norm_f = nn.Identity()
    batch = ar_task.sample(16, seed=3)
    corrupted = ar_task.corrupt(batch, "key", 3).tokens
    cells = [Cell("layers.1.resid_post", r) for r in batch.roles] + [Cell("layers.1.mlp_out", r) for r in batch.roles]
    exact = patch_cells(lm, corrupted, batch.tokens, cells, batch.roles, batch.answer, batch.answer_pos)
    estimate = gradient_cells(lm, corrupted, batch.tokens, cells, batch.roles, batch.answer, batch.answer_pos)
    torch.testing.assert_close(estimate["logit_patched"], exact["logit_patched"], atol=1e-4, rtol=1e-4)
    for k in ("p_base", "logit_base", "p_source", "logit_source"):
        torch.testing.assert_close(estimate[k], exact[k], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mixer", sorted(MIXERS))
def test_every_site_of_every_mixer_and_unchanged_cells_estimate_no_change(ar_task, mixer):
    """Cells whose source activation equals the base's (positions before the corrupted key) change
    nothing; every site, inside the mixers and the recurrent states too, gets an estimate."""
    torch.manual_seed(0)
    lm = random_lm(ar_task.vocab_size, mixer=mixer, n_layers=2)
    batch = ar_task.sample(8, seed=1)
    corrupted = ar_task.corrupt(batch, "key", 1).tokens
    where = {"bos": torch.zeros(8, dtype=torch.long), **batch.roles}
    cells = [Cell(s, p) for s in lm.sites() for p in where]
    r = gradient_cells(lm, corrupted, batch.tokens, cells, where, batch.answer, batch.answer_pos)
    assert r["p_patched"].shape == (len(cells), 8) and torch.isfinite(r["p_patched"]).all()
    unchanged = [i for i, c in enumerate(cells) if c.position == "bos"]
    torch.testing.assert_close(r["p_patched"][unchanged], r["p_base"].expand(len(unchanged), -1))


def test_first_order_in_the_size_of_the_patch(ar_task):
    """Patch a blend of source and base at one cell, (1 − ε)·base + ε·source: the exact change divided by
    ε tends to the estimate's as ε → 0 (the estimate is the derivative along the patch)."""
    lm = random_lm(ar_task.vocab_size, n_layers=2, mixer="mamba")
    batch = ar_task.sample(8, seed=5)
    corrupted = ar_task.corrupt(batch, "key", 5).tokens
    cell = Cell("layers.1.resid_pre", "key")
    est = gradient_cells(lm, corrupted, batch.tokens, [cell], batch.roles, batch.answer, batch.answer_pos)
    slope = est["p_patched"][0] - est["p_base"]
    rows, pos = torch.arange(8), batch.roles["key"]
    with torch.no_grad():
        with record(lm.sites(), [cell.site]) as src:
            lm(batch.tokens)
        with record(lm.sites(), [cell.site]) as base:
            lm(corrupted)
        errors = []
        for eps in (1e-1, 1e-2, 1e-3):
            def blend(x, eps=eps):
                x = x.clone()
                x[rows, pos] = (1 - eps) * base[cell.site][rows, pos] + eps * src[cell.site][rows, pos]
                return x
            with attach(lm.sites(), {cell.site: blend}):
                p = answer_scores(lm(corrupted, positions=batch.answer_pos[:, None]), batch.answer[:, None])[0]
            errors.append(((p - est["p_base"]) / eps - slope).abs().max().item())
    assert errors[2] < errors[0] and errors[2] < 1e-2 * max(slope.abs().max().item(), 1e-3) + 1e-4


def test_interchange_tables_say_the_method_and_refuse_unknown_ones(ar_task):
    lm = random_lm(ar_task.vocab_size)
    batch = ar_task.sample(16, seed=2)
    exact = interchange(lm, ar_task, batch, "key", ["resid_pre"], ["key", "value", "query"])
    grad = interchange(lm, ar_task, batch, "key", ["resid_pre"], ["key", "value", "query"], method="gradient")
    assert list(grad.columns) == list(exact.columns)
    assert set(exact["method"]) == {"exact"} and set(grad["method"]) == {"gradient"}
    with pytest.raises(ValueError, match="method must be one of"):
        interchange(lm, ar_task, batch, "key", ["resid_pre"], method="exactly")


@pytest.mark.parametrize("mixer", ["mamba", "h3", "deltanet", "based"])
def test_state_estimates_are_the_derivative_along_the_patch(ar_task, mixer):
    """A state cell's estimate is the derivative of the exact patch along (1 − ε)·base + ε·source state."""
    lm = random_lm(ar_task.vocab_size, n_layers=2, mixer=mixer).double()
    batch = ar_task.sample(8, seed=6)
    corrupted = ar_task.corrupt(batch, "key", 6).tokens
    cell = Cell("layers.0.state", "value")
    est = gradient_cells(lm, corrupted, batch.tokens, [cell], batch.roles, batch.answer, batch.answer_pos)
    slope = est["p_patched"][0].double() - est["p_base"].double()
    rows, pos = torch.arange(8), batch.roles["value"]
    with torch.no_grad():
        with record(lm.sites(), [cell.site]) as src:
            lm(batch.tokens)
        with record(lm.sites(), [cell.site]) as base:
            lm(corrupted)
        h_src, h_base = src[cell.site].at(rows, pos), base[cell.site].at(rows, pos)
        errors = []
        for eps in (1e-1, 1e-2, 1e-3):
            with attach(lm.sites(), {cell.site: lambda v, eps=eps: v.patched(rows, pos, h_base + eps * (h_src - h_base))}):
                p = answer_scores(lm(corrupted, positions=batch.answer_pos[:, None]), batch.answer[:, None])[0]
            errors.append(((p.double() - est["p_base"].double()) / eps - slope).abs().max().item())
    assert slope.abs().max() > 1e-6  # the state matters here
    assert errors[2] < errors[0] and errors[2] < 1e-2 * slope.abs().max().item() + 1e-5
