"""transformers models ready for `mecheval study … --archs` (import paths `mecheval.hf.models:NAME`), on the
study's width and depth (`d_model`, `n_layers` come from the study). Each is `{hf: class, config: {…}}`.

MAMBA    MambaForCausalLM as published: state 16, expand 2, conv 4, conv bias (its defaults)
MAMBA2   Mamba2ForCausalLM: state 16, heads of 16 channels, one B/C group (the owned path's)
GPT2     GPT2LMHeadModel with one head (the zoo's attention default) and no dropout
LLAMA    LlamaForCausalLM with one head, an MLP of 4 D, no dropout
"""

MAMBA = {"hf": "MambaForCausalLM", "config": {}}
MAMBA2 = {"hf": "Mamba2ForCausalLM", "config": {"head_dim": 16, "num_heads": 8, "n_groups": 1, "chunk_size": 64}}
GPT2 = {"hf": "GPT2LMHeadModel", "config": {"n_head": 1, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
                                            "n_positions": 1024}}
LLAMA = {"hf": "LlamaForCausalLM", "config": {"num_attention_heads": 1, "num_key_value_heads": 1, "intermediate_size": 256,
                                              "max_position_embeddings": 1024}}
