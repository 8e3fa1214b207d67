"""Causal softmax attention (Vaswani et al., 2017).

For each head h with d_h = D / H:
    q_t = W_q x_t,  k_t = W_k x_t,  v_t = W_v x_t                      [B, T, H, d_h]
    a_{t,s} = softmax_{s <= t}( q_t · k_s / sqrt(d_h) )                 [B, H, T, T]
    core_t = sum_{s <= t} a_{t,s} v_s      (site `core_out`, heads concatenated: [B, T, D])
    y_t = W_o core_t                                                  [B, T, D]
The recurrent view is the same computation with a growing key/value cache.

Sites inside: `attn_pattern` (a, [B, T_query, H, T_key]: patching it at a position replaces that query's
weights) and `head{h}` (head h's core_t, [B, T, d_h]: patching it changes only head h's contribution to
y_t = sum_h W_o[:, h] core_t^h). Plain runs (training, evaluation) use fused SDPA; runs inside `attach` /
`record` (every run of an intervention: `sites.observed`) or with a hook on one of these sites compute the
weights explicitly, with the same result up to float rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pydantic import Field

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec
from mecheval.models.shortconv import ConvSpec
from mecheval.models.sites import Site, observed


class AttentionOptions(MixerOptions):
    n_heads: int = Field(1, gt=0)
    out_bias: bool = Field(False, description="a bias in W_o (y_t = W_o core_t + b_o), as zoology's attention has")


class Attention(Mixer):
    has_conv = False

    def __init__(self, d_model: int, conv: ConvSpec, options: AttentionOptions, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.n_heads = options.n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=options.out_bias)
        self.attn_pattern = Site()
        for h in range(self.n_heads):
            setattr(self, f"head{h}", Site())
        self.core_out = Site()

    def _observed(self) -> bool:
        """Is the run observed (`sites.observed`), or does a hook read the pattern or a head?"""
        inner = ["attn_pattern", *(f"head{h}" for h in range(self.n_heads))]
        return observed() or any(getattr(self, name)._forward_hooks for name in inner)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, D] -> [B, H, T, d_h]
        B, T, D = x.shape
        return x.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.core_out(self.core(self.qkv(x))))

    def core(self, qkv: torch.Tensor) -> torch.Tensor:
        """The projections q, k, v concatenated [B, T, 3D] -> the heads' outputs concatenated [B, T, D]
        (fused SDPA, or explicit weights through the sites where the run is observed)."""
        B, T, D3 = qkv.shape
        q, k, v = (self._heads(z) for z in qkv.split(D3 // 3, dim=-1))
        if self._observed():
            core = self._explicit(q, k, v)  # [B, T, H, d_h]
        else:
            core = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)  # [B, T, H, d_h]
        return core.reshape(B, T, D3 // 3)

    def _explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """SDPA's computation through the sites: q, k, v [B, H, T, d_h] -> per-head outputs [B, T, H, d_h]."""
        T = q.shape[2]
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # [B, H, T, T]
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        pattern = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        pattern = self.attn_pattern(pattern.transpose(1, 2)).transpose(1, 2)  # the site: [B, T_query, H, T_key]
        core = (pattern @ v).transpose(1, 2)  # [B, T, H, d_h]
        return torch.stack([getattr(self, f"head{h}")(core[:, :, h]) for h in range(self.n_heads)], 2)

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
