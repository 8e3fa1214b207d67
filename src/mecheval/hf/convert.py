"""mecheval's own LM with the weights of a `transformers` model where the two designs coincide (the
equivalence checks of docs/huggingface.md):

    from_mamba(MambaForCausalLM)  -> LM(mixer mamba, RMSNorm, no MLP, embedding unscaled, tied head)
    from_gpt2(GPT2LMHeadModel)    -> LM(mixer attention, LayerNorm, GELU MLP, learned positions, untied head)

Each returns (lm, pairs): `pairs` lists (our parameter, theirs, scale, transposed) with ours = scale · theirs,
transposed where the layouts differ (GPT-2's Conv1D stores [in, out]); gradients then relate as
grad_ours = grad_theirs / scale (transposed likewise). GPT-2 maps only where its design is ours: no biases
(every bias zero), exact GELU (`activation_function: gelu`); ValueError naming what differs otherwise.
"""

from __future__ import annotations

import torch
from torch import nn

from mecheval.models.config import ModelConfig
from mecheval.models.lm import LM


Pairs = list[tuple[str, str, float, bool]]


def _load(lm: LM, model: nn.Module, pairs: Pairs) -> tuple[LM, Pairs]:
    ours, theirs = dict(lm.named_parameters()), dict(model.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for a, b, scale, transposed in pairs:
            w = theirs[b] * scale
            ours[a].copy_(w.T if transposed else w)
    return lm, pairs


def from_mamba(model: nn.Module) -> tuple[LM, Pairs]:
    """Our Mamba LM with a MambaForCausalLM's weights (module docstring)."""
    c = model.config
    if c.use_bias or c.hidden_act != "silu" or not c.tie_word_embeddings:
        raise ValueError(f"from_mamba: needs use_bias false, hidden_act silu, tied embeddings; got {c.use_bias}, {c.hidden_act}, {c.tie_word_embeddings}")
    cfg = ModelConfig(
        vocab_size=c.vocab_size, d_model=c.hidden_size, n_layers=c.num_hidden_layers, mixer="mamba", d_conv=c.conv_kernel,
        norm="rmsnorm", norm_eps=c.layer_norm_epsilon, init="zoology",
        options={"mamba": {"d_state": c.state_size, "expand": c.intermediate_size // c.hidden_size,
                           "dt_rank": int(c.time_step_rank), "conv_bias": c.use_conv_bias}},
    )
    pairs = [("embed.weight", "backbone.embeddings.weight", 1.0, False), ("norm_f.weight", "backbone.norm_f.weight", 1.0, False)]
    for i in range(c.num_hidden_layers):
        theirs, ours = f"backbone.layers.{i}.", f"layers.{i}."
        pairs.append((ours + "norm1.weight", theirs + "norm.weight", 1.0, False))
        names = {"in_proj.weight": "in_proj.weight", "conv.weight": "conv1d.weight", "x_proj.weight": "x_proj.weight",
                 "dt_proj.weight": "dt_proj.weight", "dt_proj.bias": "dt_proj.bias", "A_log": "A_log", "D": "D",
                 "out_proj.weight": "out_proj.weight"} | ({"conv_bias": "conv1d.bias"} if c.use_conv_bias else {})
        pairs += [(f"{ours}mixer.{a}", f"{theirs}mixer.{b}", 1.0, False) for a, b in names.items()]
    return _load(LM(cfg), model, pairs)


def from_gpt2(model: nn.Module) -> tuple[LM, Pairs]:
    """Our attention LM with a GPT2LMHeadModel's weights (module docstring)."""
    c = model.config
    biased = [n for n, p in model.named_parameters() if n.endswith(".bias") and p.abs().max() > 0]
    if biased or c.activation_function != "gelu" or c.n_inner not in (None, 4 * c.n_embd):
        raise ValueError(f"from_gpt2: GPT-2 is ours only with zero biases, activation gelu, n_inner 4·D; "
                         f"nonzero biases {biased[:3]}, activation {c.activation_function!r}, n_inner {c.n_inner}")
    cfg = ModelConfig(
        vocab_size=c.vocab_size, d_model=c.n_embd, n_layers=c.n_layer, mixer="attention", norm="layernorm",
        norm_eps=c.layer_norm_epsilon, pos_emb="learned", max_len=c.n_positions, tie_embeddings=False,
        options={"attention": {"n_heads": c.n_head}},
    )
    pairs = [("embed.weight", "transformer.wte.weight", c.n_embd**-0.5, False),  # ours: h_0 = sqrt(D) E + P
             ("pos.weight", "transformer.wpe.weight", 1.0, False), ("head.weight", "lm_head.weight", 1.0, False),
             ("norm_f.weight", "transformer.ln_f.weight", 1.0, False)]
    for i in range(c.n_layer):
        theirs, ours = f"transformer.h.{i}.", f"layers.{i}."
        names = {"norm1.weight": "ln_1.weight", "mixer.qkv.weight": "attn.c_attn.weight", "mixer.out.weight": "attn.c_proj.weight",
                 "norm2.weight": "ln_2.weight", "mlp.up.weight": "mlp.c_fc.weight", "mlp.down.weight": "mlp.c_proj.weight"}
        pairs += [(ours + a, theirs + b, 1.0, ".c_" in b) for a, b in names.items()]  # Conv1D: [in, out]
    return _load(LM(cfg), model, pairs)
