"""Tiny random-weight `transformers` models of each family, built offline from configs."""

from __future__ import annotations

import pytest
import torch

V = 40  # covers the small AR task's 35 tokens


def tiny(family: str, vocab: int = V):
    """A tiny random-weight causal LM of `family` (eval mode, seeded)."""
    import transformers as tr

    torch.manual_seed(0)
    mamba = dict(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, state_size=8, expand=2, conv_kernel=4)
    model = {
        "gpt2": lambda: tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                                          bos_token_id=1, eos_token_id=2, initializer_range=0.2)),
        "llama": lambda: tr.LlamaForCausalLM(tr.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                                                             num_hidden_layers=2, num_attention_heads=2,
                                                             num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.2,
                                                             bos_token_id=1, eos_token_id=2)),
        "mamba": lambda: tr.MambaForCausalLM(tr.MambaConfig(**mamba)),
        "mamba2": lambda: tr.Mamba2ForCausalLM(tr.Mamba2Config(**mamba, num_heads=8, head_dim=8, n_groups=1, chunk_size=16)),
    }[family]()
    return model.eval()


FAMILIES = ("gpt2", "llama", "mamba", "mamba2")
SSM = ("mamba", "mamba2")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Mamba of 64 tokens saved by save_pretrained (no tokenizer beside it)."""
    d = tmp_path_factory.mktemp("hf") / "tiny-mamba"
    tiny("mamba", vocab=64).save_pretrained(d)
    return d
