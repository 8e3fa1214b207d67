"""Attention's pattern and per-head sites, on a path that keeps fused SDPA when nothing observes them;
`run_with_cache`."""

from __future__ import annotations

import pytest
import torch

from mecheval.interventions import interchange
from mecheval.models import ModelConfig, build_model
from mecheval.models.mixers.attention import Attention
from mecheval.models.sites import attach, run_with_cache
from mecheval.tasks import make_task

H, D, V = 2, 16, 20


def attention_lm(n_heads: int = H):
    torch.manual_seed(0)
    cfg = ModelConfig(mixer="attention", vocab_size=V, d_model=D, n_layers=2, options={"attention": {"n_heads": n_heads}})
    return build_model(cfg).eval()


def test_unobserved_runs_use_sdpa_and_observed_runs_give_the_same_logits(monkeypatch):
    lm, tokens = attention_lm(), torch.randint(0, V, (3, 9))
    logits, cache = run_with_cache(lm, tokens, ["layers.*.attn_pattern", "head1"])
    assert set(cache) == {"layers.0.attn_pattern", "layers.1.attn_pattern", "layers.0.head1", "layers.1.head1"}
    pattern = cache["layers.1.attn_pattern"]  # [B, T_query, H, T_key]: causal rows summing to 1
    assert pattern.shape == (3, 9, H, 9)
    torch.testing.assert_close(pattern.sum(-1), torch.ones(3, 9, H))
    assert (pattern.permute(0, 2, 1, 3).triu(1) == 0).all()
    monkeypatch.setattr(Attention, "_explicit", lambda *a: pytest.fail("an unobserved run left SDPA"))
    torch.testing.assert_close(lm(tokens), logits, atol=1e-5, rtol=1e-5)
    lm.train()
    lm(tokens).sum().backward()  # training: SDPA, no site hooked


def test_patching_one_head_changes_only_that_heads_contribution():
    lm, tokens = attention_lm(), torch.randint(0, V, (4, 9))
    mixer = lm.layers[1].mixer
    _, base = run_with_cache(lm, tokens, ["layers.1.head0", "layers.1.head1", "layers.1.core_out", "layers.1.mixer_out"])
    new = torch.randn_like(base["layers.1.head1"])
    with attach(lm.sites(), {"layers.1.head1": lambda x: new}):
        _, patched = run_with_cache(lm, tokens, ["layers.1.core_out", "layers.1.mixer_out"])
    d_h = D // H
    core, core0 = patched["layers.1.core_out"], base["layers.1.core_out"]
    torch.testing.assert_close(core[..., :d_h], core0[..., :d_h])  # head 0 untouched
    torch.testing.assert_close(core[..., d_h:], new)
    # the output changes by head 1's slice of W_o times head 1's change, nothing else
    expected = base["layers.1.mixer_out"] + (new - base["layers.1.head1"]) @ mixer.out.weight[:, d_h:].T
    torch.testing.assert_close(patched["layers.1.mixer_out"], expected, atol=1e-5, rtol=1e-5)


def test_patching_a_query_rows_pattern_sets_what_it_reads():
    """A one-hot pattern row at query t on key s makes head h's output at t the value at s."""
    lm, tokens = attention_lm(), torch.randint(0, V, (2, 9))
    mixer, t, s = lm.layers[0].mixer, 7, 2
    _, c = run_with_cache(lm, tokens, ["layers.0.mixer_in"])
    values = mixer.qkv(c["layers.0.mixer_in"])[..., 2 * D:].view(2, 9, H, D // H)  # [B, T, H, d_h]

    def one_hot(p):
        p = p.clone()
        p[:, t] = 0
        p[:, t, :, s] = 1
        return p

    with attach(lm.sites(), {"layers.0.attn_pattern": one_hot}):
        _, out = run_with_cache(lm, tokens, ["layers.0.head0", "layers.0.head1"])
    for h in range(H):
        torch.testing.assert_close(out[f"layers.0.head{h}"][:, t], values[:, s, h], atol=1e-6, rtol=1e-5)


def test_the_engine_patches_head_and_pattern_sites():
    """One head is the whole core: patching `head0` equals patching `core_out`; pattern cells run too."""
    ar_task = make_task("ar", n_pairs=4, n_keys=16, n_values=16)
    batch = ar_task.sample(32, seed=0)
    lm = build_model(ModelConfig(mixer="attention", vocab_size=ar_task.vocab_size, d_model=D, n_layers=2)).eval()
    df = interchange(lm, ar_task, batch, "key", ["layers.1.head0", "layers.1.core_out", "layers.1.attn_pattern"],
                     ["key", "query"], subsets=None).set_index(["site", "position"])
    for pos in ("key", "query"):
        assert df.at[("head0", pos), "p_patched"] == pytest.approx(df.at[("core_out", pos), "p_patched"], abs=1e-6)
    assert df.loc["attn_pattern", "p_patched"].notna().all()
    assert df.at[("head0", "query"), "p_patched"] != pytest.approx(df.at[("head0", "query"), "p_corrupt"], abs=1e-6)


def test_run_with_cache_by_name_and_glob():
    lm, tokens = attention_lm(), torch.randint(0, V, (2, 5))
    logits, cache = lm.run_with_cache(tokens, ["resid_pre"])
    assert list(cache) == ["layers.0.resid_pre", "layers.1.resid_pre"] and logits.shape == (2, 5, V)
    torch.testing.assert_close(cache["layers.0.resid_pre"], lm.embed_tokens(tokens))
    assert set(run_with_cache(lm, tokens)[1]) == set(lm.sites())
    with pytest.raises(KeyError, match="matches no site"):
        run_with_cache(lm, tokens, ["layers.7.*"])
