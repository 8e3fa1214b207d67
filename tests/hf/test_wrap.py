"""`mecheval.hf.wrap` on tiny models of each family: the sites it finds, interchanges through it against
patches made by hand with forward hooks, state patches on the owned path against the model's own forward
with its cached state replaced, and the errors for models it cannot map."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.hf.conftest import FAMILIES, SSM, tiny

from mecheval.hf import UnsupportedModel, wrap
from mecheval.interventions.engine import Cell, answer_scores, patch_cells
from mecheval.models.sites import attach, record
from mecheval.tasks import make_task

tr = pytest.importorskip("transformers")  # the optional extra `hf`: these tests skip without it

# hand-kept paths, for the hand-made patches only: (blocks, norm1, mixer, mlp)
PATHS = {
    "gpt2": ("transformer.h", "ln_1", "attn", "mlp"),
    "llama": ("model.layers", "input_layernorm", "self_attn", "mlp"),
    "mamba": ("backbone.layers", "norm", "mixer", None),
    "mamba2": ("backbone.layers", "norm", "mixer", None),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_sites_found_and_logits_kept(family):
    model = tiny(family)
    lm = wrap(model)
    inner = ["conv_in", "conv_out", "state", "core_out"] if family in SSM else []
    tail = ["mixer_out", "resid_post"] if family in SSM else ["mixer_out", "mlp_out", "resid_post"]
    assert list(lm.sites()) == [f"layers.{i}.{k}" for i in range(2) for k in ["resid_pre", "mixer_in", *inner, *tail]]
    tokens = torch.randint(0, 40, (3, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(tokens).logits
        torch.testing.assert_close(lm(tokens), ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lm(tokens, positions=torch.tensor([3, 4, 10])), ref[torch.arange(3), [3, 4, 10]], atol=1e-5, rtol=1e-5)
    assert not model.training and not lm.training
    state = lm.state_dict()  # every weight once (a tied head is its embedding), ready for safetensors
    assert len({v.data_ptr() for v in state.values()}) == len(state)
    tied = model.lm_head.weight is model.get_input_embeddings().weight
    assert tied == (family in ("gpt2", "mamba"))  # transformers' defaults
    assert {f"model.{k}" for k in model.state_dict()} - set(state) == ({"model.lm_head.weight"} if tied else set())
    lm.load_state_dict(state)


def _hand_patch(model, family, site, layer, base, source, pos, answer, answer_pos):
    """p of the answer when `site` of `layer` at `pos` [B] is set to the source run's, by forward hooks on
    the transformers module itself."""
    blocks_path, norm1, mixer, mlp = PATHS[family]
    block = model.get_submodule(blocks_path)[layer]
    module, pre = {"resid_pre": (block, True), "mixer_in": (getattr(block, norm1), False),
                   "mixer_out": (getattr(block, mixer), False), "resid_post": (block, False),
                   "mlp_out": (getattr(block, mlp) if mlp else None, False)}[site]
    rows = torch.arange(len(pos))
    seen = {}

    def first(x):
        return x[0] if isinstance(x, tuple) else x

    def grab(_m, args, kwargs, out=None):
        x = (args[0] if args else kwargs["hidden_states"]) if pre else first(out)
        seen["x"] = x[rows, pos].clone()

    def put(_m, args, kwargs, out=None):
        x = ((args[0] if args else kwargs["hidden_states"]) if pre else first(out)).clone()
        x[rows, pos] = seen["x"]
        if pre:
            return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})
        return (x, *out[1:]) if isinstance(out, tuple) else x

    register = module.register_forward_pre_hook if pre else module.register_forward_hook
    with torch.no_grad():
        h = register(grab, with_kwargs=True)
        model(source)
        h.remove()
        h = register(put, with_kwargs=True)
        logits = model(base).logits
        h.remove()
    return answer_scores(logits[rows, answer_pos][:, None], answer[:, None])


@pytest.mark.parametrize("family", FAMILIES)
def test_ar_interchange_through_wrap_equals_a_hand_made_hook_patch(family):
    model = tiny(family)
    lm = wrap(model)
    task = make_task("ar", n_pairs=4, n_keys=16, n_values=16)
    batch = task.sample(16, seed=0)
    base = task.corrupt(batch, "key", 0).tokens
    sites = ["resid_pre", "mixer_in", "mixer_out", "resid_post"] + ([] if family in SSM else ["mlp_out"])
    cells = [Cell(f"layers.{i}.{s}", role) for i in range(2) for s in sites for role in ("key", "value", "query")]
    got = patch_cells(lm, base, batch.tokens, cells, batch.roles, batch.answer, batch.answer_pos)
    moved = 0
    for c, p, logit in zip(cells, got["p_patched"], got["logit_patched"]):
        want_p, want_logit = _hand_patch(model, family, c.kind, c.layer, base, batch.tokens, batch.roles[c.position], batch.answer, batch.answer_pos)
        torch.testing.assert_close(p, want_p, atol=1e-5, rtol=1e-4, msg=f"{c}")
        torch.testing.assert_close(logit, want_logit, atol=1e-4, rtol=1e-4, msg=f"{c}")
        moved += bool((p - got["p_base"]).abs().max() > 1e-3)
    assert moved >= len(cells) // 3  # the patches do move the scores (random weights; a block input at the
    # value position has the same token in both runs, so some cells move nothing)


def _decode_with_state(model, layer, tokens, t, state):
    """The model's own forward: tokens[:, :t+1] with its cache, layer's recurrent state after t replaced by
    `state`, then one token at a time -> logits at t+1… [B, T-t-1, V]."""
    with torch.no_grad():
        cache = model(tokens[:, : t + 1], use_cache=True).cache
        held = cache.get_recurrent_state(layer, state_idx=0)
        held.copy_(state.view_as(held))
        return torch.cat([model(tokens[:, j : j + 1], cache=cache, use_cache=True).logits for j in range(t + 1, tokens.shape[1])], 1)


@pytest.mark.parametrize("family", SSM)
@pytest.mark.parametrize("layer", [0, 1])
def test_state_patch_on_the_owned_path_equals_the_models_forward_with_the_state_replaced(family, layer):
    model = tiny(family)
    lm = wrap(model)
    g = torch.Generator().manual_seed(2)
    base, source = torch.randint(0, 40, (2, 2, 10), generator=g)
    t, rows, pos = 4, torch.arange(2), torch.tensor([4, 4])
    name = f"layers.{layer}.state"
    with torch.no_grad(), record(lm.sites(), [name]) as src:
        lm(source)
    new = src[name].at(rows, pos)  # [2, D_state]
    with torch.no_grad():  # the owned path's state is the model's cached state
        cached = model(source[:, : t + 1], use_cache=True).cache.get_recurrent_state(layer, state_idx=0)
    torch.testing.assert_close(new, cached.reshape(2, -1), atol=1e-5, rtol=1e-4)
    with torch.no_grad(), attach(lm.sites(), {name: lambda v: v.patched(rows, pos, new)}):
        patched = lm(base)
    ref = _decode_with_state(model, layer, base, t, new)
    torch.testing.assert_close(patched[:, t + 1 :], ref, atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        torch.testing.assert_close(patched[:, : t + 1], lm(base)[:, : t + 1])  # nothing before t moves
    assert (patched[:, t + 1 :] - lm(base)[:, t + 1 :]).abs().max() > 1e-3  # and the patch does move later ones


@pytest.mark.parametrize("family", SSM)
def test_state_cell_through_the_engine_matches_the_patched_forward(family):
    lm = wrap(tiny(family))
    task = make_task("ar", n_pairs=4, n_keys=16, n_values=16)
    batch = task.sample(8, seed=1)
    base = task.corrupt(batch, "key", 0).tokens
    got = patch_cells(lm, base, batch.tokens, [Cell("layers.0.state", "key")], batch.roles, batch.answer, batch.answer_pos)
    rows, pos = torch.arange(8), batch.roles["key"]
    with torch.no_grad():
        with record(lm.sites(), ["layers.0.state"]) as src:
            lm(batch.tokens)
        new = src["layers.0.state"].at(rows, pos)
        with attach(lm.sites(), {"layers.0.state": lambda v: v.patched(rows, pos, new)}):
            logits = lm(base, positions=batch.answer_pos)
    want = answer_scores(logits[:, None], batch.answer[:, None])[0]
    torch.testing.assert_close(got["p_patched"][0], want, atol=1e-5, rtol=1e-4)


def test_a_parallel_block_is_refused_naming_what_fails():
    model = tr.GPTJForCausalLM(tr.GPTJConfig(vocab_size=40, n_embd=32, n_layer=2, n_head=2, rotary_dim=8, n_positions=64)).eval()
    with pytest.raises(UnsupportedModel, match=r"GPTJForCausalLM layer 0 \(GPTJBlock\): expected children called as norm, mixer\[, norm, mlp\].*called: \['ln_1', 'attn', 'mlp'\]"):
        wrap(model)


def test_a_model_without_blocks_is_refused():
    class NoBlocks(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(4, 4)

        def get_output_embeddings(self):
            return self.head

    with pytest.raises(UnsupportedModel, match="expected one ModuleList of None blocks of one class, found none"):
        wrap(NoBlocks())


def test_wrapping_leaves_the_model_as_it_was():
    model = tiny("mamba")
    lm = wrap(model)
    before = {n: type(m).forward for n, m in model.named_modules()}
    tokens = torch.randint(0, 40, (2, 8))
    with torch.no_grad():
        lm(tokens)
        lm.forward_from(1, lm.embed_tokens(tokens))
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    assert all("forward" not in vars(m) for m in model.modules())
    assert len(model.backbone.layers) == 2 and {n: type(m).forward for n, m in model.named_modules()} == before


@pytest.mark.parametrize("family", FAMILIES)
def test_built_on_the_meta_device_it_lists_the_same_sites(family):
    """What `mecheval sweep`'s preflight and `intervene`'s argument check do: no weights, no compute on them."""
    with torch.device("meta"):
        lm = wrap(tiny(family))
    assert next(lm.parameters()).is_meta
    assert list(lm.sites()) == list(wrap(tiny(family)).sites())
