"""The batched engine: exactness properties and equality with the one-forward-per-cell reference (`reference`)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mecheval.interventions import Cell, interchange, patch_all_positions, patch_cells, resolve_sites
from mecheval.interventions.engine import _patch_fns
from mecheval.interventions.reference import reference_patch_cells
from mecheval.models.lm import build_model
from mecheval.models.mixers import MIXERS
from mecheval.models.sites import attach, record


def random_lm(vocab: int, seed: int = 0, **cfg):
    torch.manual_seed(seed)
    lm = build_model(dict(vocab_size=vocab, max_len=32, d_model=16, init_std=0.5, **cfg)).eval()
    with torch.no_grad():  # larger weights than at init, so patches change the output visibly
        for p in lm.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return lm


def test_identity_patch_is_bitwise(ar_task):
    batch = ar_task.sample(8, seed=0)
    lm = random_lm(ar_task.vocab_size)
    cells = [Cell(s, p) for s in lm.sites() for p in ("key", "query")]
    r = patch_cells(lm, batch.tokens, batch.tokens, cells, batch.roles, batch.answer, batch.answer_pos, chunk=1)
    assert torch.equal(r["p_patched"], r["p_base"].expand_as(r["p_patched"]))
    assert torch.equal(r["logit_patched"], r["logit_base"].expand_as(r["logit_patched"]))


def test_patch_hooks_writing_the_same_values_change_nothing(ar_task):
    """The engine's hooks, run directly: the clean activation patched into the clean run is bitwise a no-op."""
    batch = ar_task.sample(8, seed=0)
    lm = random_lm(ar_task.vocab_size)
    rows = torch.arange(8)[:, None]
    with torch.no_grad(), record(lm.sites()) as acts:
        clean = lm(batch.tokens, positions=batch.answer_pos)
    for site in lm.sites():
        for role in ("key", "query"):
            pos = batch.roles[role][:, None]
            tiles = [(Cell(site, role), pos, acts[site][rows, pos])]
            with torch.no_grad(), attach(lm.sites(), _patch_fns(tiles)):
                assert torch.equal(lm(batch.tokens, positions=batch.answer_pos), clean), (site, role)


@pytest.mark.parametrize("direction", ["sufficiency", "necessity"])
def test_patching_every_position_of_the_embedding_restores_exactly(ar_task, direction):
    batch = ar_task.sample(16, seed=1)
    lm = random_lm(ar_task.vocab_size)
    B, T = batch.tokens.shape
    everywhere = {"all": torch.arange(T).expand(B, T)}
    corrupted = ar_task.corrupt(batch, "key", 0).tokens
    base, source = (corrupted, batch.tokens) if direction == "sufficiency" else (batch.tokens, corrupted)
    r = patch_cells(lm, base, source, [Cell("layers.0.resid_pre", "all")], everywhere, batch.answer, batch.answer_pos)
    assert torch.equal(r["logit_patched"][0], r["logit_source"])
    # Only the key token differs, so position t restores exactly the examples whose key is at t.
    df = patch_all_positions(lm, ar_task, batch, "key", ["layers.0.resid_pre"], direction=direction)
    assert list(df["position"]) == list(range(T)) and df["position"].dtype.kind == "i"  # integers: pivots order 0, 1, 2, …
    assert df["attrib"].sum() == pytest.approx(1.0, abs=1e-6)


def test_key_patch_at_the_embedding_has_attribution_one(ar_task):
    """Only the key token differs: patching its embedding restores the clean run exactly."""
    batch = ar_task.sample(32, seed=2)
    lm = random_lm(ar_task.vocab_size)
    df = interchange(lm, ar_task, batch, "key", ["layers.0.resid_pre"], ["key", "value", "query"], subsets=None)
    attrib = df.set_index("position")["attrib"]
    assert attrib.to_dict() == pytest.approx({"key": 1.0, "value": 0.0, "query": 0.0}, abs=1e-6)
    row = df.set_index("position").loc["key"]
    assert row.p_patched == pytest.approx(row.p_clean, abs=1e-6)
    assert (row.attrib_lo, row.attrib_hi) == pytest.approx((1.0, 1.0), abs=1e-6)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    n_layers=st.integers(1, 3),
    mlp=st.booleans(),
    norm=st.sampled_from(["layernorm", "rmsnorm"]),
    n=st.integers(1, 6),
    chunk=st.sampled_from([None, 1, 2, 5]),
    n_sites=st.integers(1, 4),
)
def test_batched_equals_reference_loop(ar_task, seed, n_layers, mlp, norm, n, chunk, n_sites):
    lm = random_lm(ar_task.vocab_size, seed, n_layers=n_layers, mlp=mlp, norm=norm)
    batch = ar_task.sample(n, seed=seed)
    corrupted = ar_task.corrupt(batch, "value", seed).tokens
    g = torch.Generator().manual_seed(seed)
    names = list(lm.sites())
    sites = [names[i] for i in torch.randperm(len(names), generator=g)[:n_sites]]
    where = {**batch.roles, "random": torch.randint(batch.tokens.shape[1], (n, 2), generator=g)}
    cells = [Cell(s, p) for s in sites for p in where]
    r = patch_cells(lm, corrupted, batch.tokens, cells, where, batch.answer, batch.answer_pos, chunk=chunk)
    ref = reference_patch_cells(lm, corrupted, batch.tokens, cells, where, batch.answer, batch.answer_pos)["p_patched"]
    torch.testing.assert_close(r["p_patched"], ref, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mixer", sorted(MIXERS))
def test_every_mixer_and_its_internal_sites(ar_task, mixer):
    """conv_out / core_out inside the mixers are patchable like any other site."""
    torch.manual_seed(0)
    lm = build_model(dict(vocab_size=ar_task.vocab_size, d_model=16, n_layers=2, mixer=mixer, max_len=32)).eval()
    batch = ar_task.sample(4, seed=1)
    corrupted = ar_task.corrupt(batch, "key", 1).tokens
    cells = [Cell(s, "key") for s in lm.sites() if s.endswith(("conv_out", "core_out", "resid_mid"))]
    assert any(c.kind == "core_out" for c in cells)
    args = (lm, corrupted, batch.tokens, cells, batch.roles, batch.answer, batch.answer_pos)
    torch.testing.assert_close(patch_cells(*args)["p_patched"], reference_patch_cells(*args)["p_patched"], atol=1e-6, rtol=1e-5)


def test_hooks_are_removed_even_on_error(ar_task):
    batch = ar_task.sample(4, seed=0)
    corrupted = ar_task.corrupt(batch, "key", 0).tokens
    lm = random_lm(ar_task.vocab_size)
    calls = []

    def fail_in_patched_pass(*_):  # the source and base runs pass; the patched run fails mid-forward
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("boom")

    own = lm.layers[1].mixer.register_forward_hook(fail_in_patched_pass)
    with pytest.raises(RuntimeError, match="boom"):
        cells = [Cell("layers.1.mixer_in", "key")]
        patch_cells(lm, corrupted, batch.tokens, cells, batch.roles, batch.answer, batch.answer_pos)
    own.remove()
    assert len(calls) == 3
    assert all(not m._forward_hooks for m in lm.modules())


def test_site_globs(ar_task):
    lm = random_lm(ar_task.vocab_size)
    assert resolve_sites(lm, ["layers.*.resid_pre"]) == ["layers.0.resid_pre", "layers.1.resid_pre"]
    assert resolve_sites(lm, ["resid_post", "layers.0.resid_pre"]) == [
        "layers.0.resid_pre", "layers.0.resid_post", "layers.1.resid_post"
    ]
    assert resolve_sites(lm, ["*"]) == list(lm.sites())
    with pytest.raises(ValueError, match="matches no site"):
        resolve_sites(lm, ["layers.9.*"])


def test_table_columns_and_per_example(ar_task):
    batch = ar_task.sample(20, seed=3)
    lm = random_lm(ar_task.vocab_size)
    df = interchange(lm, ar_task, batch, "key", ["resid_mid"], subsets=None)
    assert len(df) == 2 * (len(batch.roles) + 1)  # every role, and key&query (the default positions)
    for col in ["layer", "site", "position", "p_clean", "p_corrupt", "p_patched", "attrib", "attrib_lo",
                "attrib_hi", "logit_clean", "logit_corrupt", "logit_patched", "logit_attrib", "n"]:
        assert col in df, col
    assert (df["n"] == 20).all() and (df["attrib_lo"] <= df["attrib"] + 1e-9).all()
    assert (df["attrib"] <= df["attrib_hi"] + 1e-9).all()
    per = interchange(lm, ar_task, batch, "key", ["resid_mid"], per_example=True)
    assert len(per) == len(df) * 20
    means = per.groupby(["layer", "position"], sort=False)["p_patched"].mean().to_numpy()
    assert means == pytest.approx(df["p_patched"].to_numpy())
    with pytest.raises(ValueError, match="are not roles of this batch"):
        interchange(lm, ar_task, batch, "key", ["resid_mid"], ["nowhere"])
