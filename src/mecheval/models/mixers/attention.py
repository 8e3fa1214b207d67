"""Causal softmax attention (Vaswani et al., 2017).

For each head h with d_h = D / H:
    q_t = W_q x_t,  k_t = W_k x_t,  v_t = W_v x_t                      [B, T, H, d_h]
    a_{t,s} = softmax_{s <= t}( q_t · k_s / sqrt(d_h) )                 [B, H, T, T]
    core_t = sum_{s <= t} a_{t,s} v_s      (site `core_out`, heads concatenated: [B, T, D])
    y_t = W_o core_t                                                  [B, T, D]
The recurrent view is the same computation with a growing key/value cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec
from mecheval.models.shortconv import ConvSpec
from mecheval.models.sites import Site


class AttentionOptions(MixerOptions):
    n_heads: int = 1


class Attention(Mixer):
    has_conv = False

    def __init__(self, d_model: int, conv: ConvSpec, options: AttentionOptions, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        if d_model % options.n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by attention n_heads={options.n_heads}")
        self.n_heads = options.n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.core_out = Site()

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, D] -> [B, H, T, d_h]
        B, T, D = x.shape
        return x.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = (self._heads(z) for z in self.qkv(x).split(D, dim=-1))
        core = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, T, d_h]
        core = self.core_out(core.transpose(1, 2).reshape(B, T, D))
        return self.out(core)

    def init_state(self, batch_size: int, device=None, dtype=None):
        """The key/value cache: two tensors [B, H, 0, d_h] that grow by one step at a time."""
        empty = torch.zeros(batch_size, self.n_heads, 0, self.d_model // self.n_heads, device=device, dtype=dtype)
        return empty, empty

    def step(self, x_t: torch.Tensor, state):
        B, D = x_t.shape
        q, k, v = (self._heads(z.unsqueeze(1)) for z in self.qkv(x_t).split(D, dim=-1))  # [B, H, 1, d_h]
        keys, values = torch.cat([state[0], k], dim=2), torch.cat([state[1], v], dim=2)
        core = F.scaled_dot_product_attention(q, keys, values)  # attends to all cached steps
        return self.out(core.transpose(1, 2).reshape(B, D)), (keys, values)


SPEC = MixerSpec(cls=Attention, options=AttentionOptions, default_conv=0, positions=True)
