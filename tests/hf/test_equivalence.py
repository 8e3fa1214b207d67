"""Equivalence with an independent implementation: mecheval's Mamba (and attention LM) with weights converted
from `transformers`' MambaForCausalLM (GPT2LMHeadModel where the designs coincide) gives its logits and
gradients, to 1e-4 relative in float32."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.hf.conftest import tiny

from mecheval.hf.convert import from_gpt2, from_mamba

tr = pytest.importorskip("transformers")  # the optional extra `hf`: these tests skip without it

TOL = dict(atol=1e-5, rtol=1e-4)


def _grads(model, tokens):
    logits = model(tokens)
    logits = logits.logits if hasattr(logits, "logits") else logits
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
    model.zero_grad()
    loss.backward()
    return logits.detach()


def _check(ours, theirs, pairs, tokens):
    torch.testing.assert_close(_grads(ours, tokens), _grads(theirs, tokens), **TOL)
    mine, hf = dict(ours.named_parameters()), dict(theirs.named_parameters(remove_duplicate=False))
    for a, b, scale, transposed in pairs:
        g = hf[b].grad / scale
        torch.testing.assert_close(mine[a].grad, g.T if transposed else g, **TOL, msg=f"{a} vs {b}")
    assert {p[0] for p in pairs} == set(mine)  # every parameter of ours is compared


@pytest.mark.parametrize("conv_bias", [True, False])
def test_our_mamba_gives_mamba_for_causal_lm_logits_and_gradients(conv_bias):
    torch.manual_seed(0)
    theirs = tr.MambaForCausalLM(tr.MambaConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, state_size=8, expand=2,
                                                 conv_kernel=4, use_conv_bias=conv_bias)).eval()
    ours, pairs = from_mamba(theirs)
    ours.eval()
    _check(ours, theirs, pairs, torch.randint(0, 40, (3, 24), generator=torch.Generator().manual_seed(3)))


def test_our_attention_lm_gives_gpt2_logits_and_gradients_where_designs_coincide():
    torch.manual_seed(0)
    theirs = tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=40, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                              activation_function="gelu", tie_word_embeddings=False,
                                              initializer_range=0.2)).eval()
    with torch.no_grad():
        for n, p in theirs.named_parameters():
            if n.endswith(".bias"):
                p.zero_()
    ours, pairs = from_gpt2(theirs)
    ours.eval()
    _check(ours, theirs, pairs, torch.randint(0, 40, (3, 24), generator=torch.Generator().manual_seed(3)))


def test_gpt2_with_its_own_design_is_refused_naming_the_difference():
    model = tiny("gpt2")  # biases and gelu_new: not our attention LM
    with pytest.raises(ValueError, match="activation 'gelu_new'"):
        from_gpt2(model)
