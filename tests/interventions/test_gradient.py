"""Attribution patching (`method="gradient"`): the first-order estimate of exact patching, checked where
it must be exact, against a finite difference, and against exact patching on small perturbations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from mecheval.interventions import Cell, interchange, patch_cells
from mecheval.interventions.engine import answer_scores
from mecheval.interventions.corrections import CORRECTIONS, attention_every, parse_correction
from mecheval.interventions.gradient import gradient_cells
from mecheval.interventions.patching import verification
from mecheval.models.mixers import MIXERS
from mecheval.models.mixers.attention import Attention, AttentionOptions
from mecheval.models.sites import attach, record
from mecheval.tasks import make_task

from .handbuilt import induction_lm
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
    ε tends to the plain estimate's as ε → 0 (it is the derivative along the patch)."""
    lm = random_lm(ar_task.vocab_size, n_layers=2, mixer="mamba")
    batch = ar_task.sample(8, seed=5)
    corrupted = ar_task.corrupt(batch, "key", 5).tokens
    cell = Cell("layers.1.resid_pre", "key")
    est = gradient_cells(lm, corrupted, batch.tokens, [cell], batch.roles, batch.answer, batch.answer_pos)
    slope = est["p_linear"][0] - est["p_base"]  # the plain first-order estimate
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
    assert set(grad.columns) == set(exact.columns) | {"verified", "attrib_estimate", "error_budget"}
    assert not grad["verified"].any()
    assert set(exact["method"]) == {"exact"} and set(grad["method"]) == {"gradient"}
    with pytest.raises(ValueError, match="method must be one of"):
        interchange(lm, ar_task, batch, "key", ["resid_pre"], method="exactly")


@pytest.mark.parametrize("mixer", ["mamba", "h3", "deltanet", "based", "gla", "rwkv7", "deltaproduct"])
def test_state_estimates_are_the_derivative_along_the_patch(ar_task, mixer):
    """A state cell's plain estimate is the derivative of the exact patch along (1 − ε)·base + ε·source state."""
    lm = random_lm(ar_task.vocab_size, n_layers=2, mixer=mixer).double()
    batch = ar_task.sample(8, seed=6)
    corrupted = ar_task.corrupt(batch, "key", 6).tokens
    cell = Cell("layers.0.state", "value")
    est = gradient_cells(lm, corrupted, batch.tokens, [cell], batch.roles, batch.answer, batch.answer_pos)
    slope = est["p_linear"][0].double() - est["p_base"].double()
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


def test_saturated_attention_corrected_estimate_is_exact_where_the_plain_one_is_not(ar_task):
    """The hand-built induction model: its heads' softmaxes saturate (match logits of 30). Without the final
    norm the answer's logit is linear in the last block's attention output and input, so for every cell that
    moves only that attention's queries and keys (its resid_pre and mixer_in, the block before's position-
    wise sites, and its core_out) the corrected estimate of the patched logit is exact patching's; the
    plain estimate, linear through the saturated softmax, misses by whole logits."""
    lm = induction_lm(ar_task.vocab_size, 64)
    lm.norm_f = nn.Identity()
    batch = ar_task.sample(16, seed=7)
    corrupted = ar_task.corrupt(batch, "key", 7).tokens
    where = {**batch.roles, "key&query": torch.stack([batch.roles["key"], batch.roles["query"]], -1)}
    sites = ["layers.1.resid_pre", "layers.1.mixer_in", "layers.0.core_out", "layers.0.mixer_out", "layers.0.resid_mid",
             "layers.0.resid_post"]
    cells = [Cell(s, p) for s in sites for p in where]
    args = (lm, corrupted, batch.tokens, cells, where, batch.answer, batch.answer_pos)
    exact, est = patch_cells(*args), gradient_cells(*args)
    change = (exact["logit_patched"] - exact["logit_base"]).abs().max()
    assert change > 0.1  # the value position's cells restore the answer (by 0.24 logits: no final norm's gain)
    torch.testing.assert_close(est["logit_patched"], exact["logit_patched"], atol=1e-5, rtol=1e-5)
    assert (est["logit_linear"] - exact["logit_patched"]).abs().max() > 0.5 * change  # measured: 1.8 × change
    plain = gradient_cells(*args, correction="none")
    torch.testing.assert_close(plain["logit_patched"], est["logit_linear"])
    torch.testing.assert_close(plain["p_patched"], est["p_linear"], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mixer", ["mamba", "h3", "deltanet", "based"])
def test_saturated_mixer_corrected_estimate_is_exact_where_the_plain_one_is_not(ar_task, mixer):
    """A 2-layer model with weights large enough that the mixers' gates (Mamba's SiLU(z), H3's and Based's
    products), Mamba's Δ = softplus(·) and DeltaNet's normalised keys work far outside their tangent. Without
    the final norm the answer's logit is linear in the last block's residual, so for every cell that moves
    only the last mixer's input (its resid_pre and mixer_in, the block before's position-wise sites; one
    position and two) the `mixer` correction, which runs that mixer exactly, gives exact patching's patched
    logit; the plain estimate misses by a good part of the change itself."""
    lm = random_lm(ar_task.vocab_size, mixer=mixer, n_layers=2, mlp=False)
    lm.norm_f = nn.Identity()
    batch = ar_task.sample(16, seed=7)
    corrupted = ar_task.corrupt(batch, "key", 7).tokens
    where = {**batch.roles, "key&query": torch.stack([batch.roles["key"], batch.roles["query"]], -1)}
    sites = ["layers.1.resid_pre", "layers.1.mixer_in", "layers.0.mixer_out", "layers.0.resid_mid", "layers.0.resid_post"]
    cells = [Cell(s, p) for s in sites for p in where]
    args = (lm, corrupted, batch.tokens, cells, where, batch.answer, batch.answer_pos)
    exact, est = patch_cells(*args), gradient_cells(*args, correction="mixer")
    change = (exact["logit_patched"] - exact["logit_base"]).abs().max()
    assert change > 1.0  # measured: 3.4 (Based) to 24 (H3) logits
    torch.testing.assert_close(est["logit_patched"], exact["logit_patched"], atol=1e-4, rtol=1e-4)
    assert (est["logit_linear"] - exact["logit_patched"]).abs().max() > 0.4 * change  # measured: 0.53 (Based) to 2 × change


def test_mixer_correction_leaves_attention_to_its_own(ar_task):
    """On an attention model the `mixer` correction touches no cell: it is the plain estimate."""
    lm = random_lm(ar_task.vocab_size, n_layers=2)
    batch = ar_task.sample(8, seed=2)
    corrupted = ar_task.corrupt(batch, "key", 2).tokens
    cells = [Cell(s, r) for s in ("layers.1.resid_pre", "layers.0.resid_post") for r in batch.roles]
    args = (lm, corrupted, batch.tokens, cells, batch.roles, batch.answer, batch.answer_pos)
    est = gradient_cells(*args, correction="mixer")
    torch.testing.assert_close(est["logit_patched"], est["logit_linear"])


def test_answer_correction_maps_the_margin_through_the_softmax(ar_task):
    """The hand-built induction model with its final norm: the answer's probability is ~0 corrupted and 1
    clean, where σ's tangent is flat. Cells that restore the answer move p from ~0 to 1: the plain estimate
    stays near 0, the margin's estimate mapped through σ gives 1 (with or without the attention correction)."""
    lm = induction_lm(ar_task.vocab_size, 64)
    batch = ar_task.sample(16, seed=8)
    corrupted = ar_task.corrupt(batch, "key", 8).tokens
    cells = [Cell("layers.1.resid_post", "query"), Cell("layers.1.mixer_out", "query"), Cell("layers.1.resid_pre", "value")]
    args = (lm, corrupted, batch.tokens, cells, batch.roles, batch.answer, batch.answer_pos)
    exact = patch_cells(*args)
    assert exact["p_base"].max() < 1e-3 and exact["p_patched"].min() > 0.999
    for correction in ("answer", "all"):
        est = gradient_cells(*args, correction=correction)
        torch.testing.assert_close(est["p_patched"], exact["p_patched"], atol=1e-3, rtol=0)
        assert est["p_linear"].max() < 0.01


def test_corrections_are_named(ar_task):
    lm = random_lm(ar_task.vocab_size)
    batch = ar_task.sample(4, seed=2)
    with pytest.raises(ValueError, match="correction must be 'all', 'none' or among"):
        gradient_cells(lm, batch.tokens, batch.tokens, [Cell("layers.0.resid_pre", "key")], batch.roles, batch.answer,
                       batch.answer_pos, correction="softmax")
    assert parse_correction("all") == ("answer", "attention", "tail")  # `mixer` is opt-in (docs/attribution-patching.md)
    assert set(parse_correction("all,mixer")) == set(CORRECTIONS) and parse_correction("none") == ()


def test_verify_patches_the_top_cells_exactly_and_reports_the_check(ar_task):
    """verify=K: the K cells with the highest estimate carry exact patching's numbers and `verified`; the
    others keep the estimate; `verification` gives K, the largest error seen and a recall bound in [0, 1]."""
    lm = random_lm(ar_task.vocab_size, n_layers=2)
    batch = ar_task.sample(32, seed=4)
    args = (lm, ar_task, batch, "key", ["resid_pre", "mixer_out"], ["key", "value", "query"])
    exact = interchange(*args, n_boot=10, subsets=None)
    est = interchange(*args, n_boot=10, method="gradient", verify=3, subsets=None)
    assert est["verified"].sum() == 3
    top = est["attrib_estimate"].nlargest(3).index
    assert set(est.index[est["verified"]]) == set(top)
    np.testing.assert_allclose(est.loc[top, "attrib"], exact.loc[top, "attrib"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(est.loc[top, "error_budget"], (exact.loc[top, "attrib"] - est.loc[top, "attrib_estimate"]).abs(),
                               rtol=1e-4, atol=1e-6)
    rest = est.index.difference(top)
    np.testing.assert_allclose(est.loc[rest, "attrib"], est.loc[rest, "attrib_estimate"])
    check = verification(est)
    assert check[["verified", "cells"]].values.tolist() == [[3, len(est)]]
    assert check["max_error"].iloc[0] == pytest.approx(est.loc[top, "error_budget"].max())
    assert 0 <= check["recall_lb"].iloc[0] <= 1
    with pytest.raises(ValueError, match="verify checks the gradient estimate"):
        interchange(*args, verify=3)


def test_recall_bound_counts_the_verified_cells_no_other_cell_can_reach():
    """Three verified cells at 0.9, 0.5, 0.1 (largest error 0.05) and others estimated at 0.42 and 0.0:
    0.9 and 0.5 are surely in the top 3 (0.42 + 0.05 < 0.5), 0.1 is not (0.42 + 0.05 reaches it): 2 of 3."""
    df = pd.DataFrame({"corrupt": "key", "direction": "sufficiency", "subset": "all", "method": "gradient",
                       "verified": [True, True, True, False, False], "attrib": [0.9, 0.5, 0.1, 0.42, 0.0],
                       "attrib_estimate": [0.85, 0.5, 0.1, 0.42, 0.0]})
    check = verification(df).iloc[0]
    assert check["max_error"] == pytest.approx(0.05) and check["recall_lb"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("mixer", ["attention", "mamba"])
def test_tail_cells_are_patched_exactly(ar_task, mixer):
    """The last block's position-wise cells (after its mixer) reach the answer through position-wise maps only:
    the `tail` correction gives exact patching's scores there, at every role and for a joined cell."""
    lm = random_lm(ar_task.vocab_size, n_layers=2, mixer=mixer)
    batch = ar_task.sample(16, seed=9)
    corrupted = ar_task.corrupt(batch, "key", 9).tokens
    where = {**batch.roles, "sep&query": torch.stack([batch.roles["sep"], batch.roles["query"]], -1)}
    sites = [s for s in ("mixer_out", "resid_mid", "mlp_out", "resid_post") if f"layers.1.{s}" in lm.sites()]  # Mamba: no MLP
    cells = [Cell(f"layers.1.{s}", p) for s in sites for p in where]
    args = (lm, corrupted, batch.tokens, cells, where, batch.answer, batch.answer_pos)
    exact, est = patch_cells(*args), gradient_cells(*args, correction="tail")
    assert (exact["p_patched"] - exact["p_base"]).abs().max() > 0.01
    torch.testing.assert_close(est["p_patched"], exact["p_patched"], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(est["logit_patched"], exact["logit_patched"], atol=1e-4, rtol=1e-4)


def test_tail_cells_are_patched_exactly_with_several_answers():
    """MQAR (4 answers per example): a cell at one position meets at most one answer position, a role's cell
    several; the `tail` correction still gives exact patching's scores."""
    task = make_task("mqar", n_pairs=4, vocab_size=64, seq_len=32)
    lm = random_lm(task.vocab_size, n_layers=2)
    batch = task.sample(8, seed=3)
    corrupted = task.corrupt(batch, "key", 3).tokens
    where = {**batch.roles, **{str(t): torch.full((8, 1), t) for t in range(0, 32, 3)}}
    cells = [Cell(f"layers.1.{s}", p) for s in ("mlp_out", "resid_post") for p in where]
    args = (lm, corrupted, batch.tokens, cells, where, batch.answer, batch.answer_pos)
    exact, est = patch_cells(*args), gradient_cells(*args, correction="tail")
    assert (exact["p_patched"] - exact["p_base"]).abs().max() > 1e-3
    torch.testing.assert_close(est["p_patched"], exact["p_patched"], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(est["logit_patched"], exact["logit_patched"], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("read", ["every row", "last rows"])
def test_attention_closed_form_equals_one_attention_per_position(read):
    """`attention_every` (every position patched alone, closed form) equals recomputing the attention per
    position, with two heads and saturated rows (logits of ~±40), with the gradient on every row or on the
    last rows only (as in the last layer), and is exactly 0 where nothing moves."""
    torch.manual_seed(0)
    mixer = Attention(16, 0, AttentionOptions(n_heads=2), 0, 32).double()
    with torch.no_grad():
        mixer.qkv.weight.mul_(6)
    B, T = 3, 9
    u, u_new, g = torch.randn(B, T, 16).double(), torch.randn(B, T, 16).double(), torch.randn(2, B, T, 16).double()
    if read == "last rows":
        g[:, :, :6] = 0
    u_new[:, 4] = u[:, 4]
    fast = attention_every(mixer, u, g)(u_new)  # [M, B, T]
    with torch.no_grad():  # one attention per position: its input at t alone set to u_new's
        core = mixer.core(mixer.qkv(u))
        slow = torch.stack([((mixer.core(mixer.qkv(torch.cat([u[:, :t], u_new[:, t : t + 1], u[:, t + 1 :]], 1))) - core) * g)
                            .sum((-1, -2)) for t in range(T)])  # [T, M, B]
    assert slow.abs().max() > 1
    torch.testing.assert_close(fast, slow.permute(1, 2, 0), atol=1e-8, rtol=1e-8)
    assert (fast[:, :, 4] == 0).all()
    with torch.no_grad():  # the q, k, v given (the runs' own) instead of projected
        given = attention_every(mixer, u, g, mixer.qkv(u))(u_new, mixer.qkv(u_new))
    torch.testing.assert_close(given, fast, atol=1e-10, rtol=1e-10)
    stacked = attention_every(mixer, u, g)(torch.stack([u_new, u]))  # several inputs at once: [K, M, B, T]
    torch.testing.assert_close(stacked[0], fast, atol=1e-10, rtol=1e-10)
    assert (stacked[1] == 0).all()


def test_the_docs_agreement_row_for_committed_attention_is_the_benchmarks(monkeypatch):
    """docs/attribution-patching.md's before → after row for the committed attention run is what
    benchmarks/gradient_patching.py computes from results/ now (Spearman, largest error, cells off)."""
    root = Path(__file__).parents[2]
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    import gradient_patching as bench

    row = bench.before_after(bench.agreement([(bench.DEFAULT_RUNS[0], None)], 256)).iloc[0]
    docs = (root / "docs" / "attribution-patching.md").read_text()
    line = next(x for x in docs.splitlines() if x.startswith(f"| {row['run']} ") and "→" in x)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert [row["Spearman"], row["max error"], row["off > 0.2"]] == cells[5:8]
