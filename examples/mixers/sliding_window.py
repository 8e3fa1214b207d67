"""Sliding-window attention (local attention; Beltagy et al., 2020, "Longformer", sec. 3.1; as in
Mistral 7B, Jiang et al., 2023, sec. 2): causal softmax attention that sees only the last `window`
positions. A plug-in built only on mecheval's public API
(`model.mixer: examples.mixers.sliding_window:SlidingWindowAttention`).

For each head h with d_h = D / H and window W (smaller than the context: W < T makes it differ from
full attention):
    q_t = W_q x_t,  k_t = W_k x_t,  v_t = W_v x_t                       [B, T, H, d_h]
    a_{t,s} = softmax_{t-W < s <= t}( q_t · k_s / sqrt(d_h) )            [B, H, T, T] (0 outside the band)
    core_t = Σ_{t-W < s <= t} a_{t,s} v_s    (site `core_out`, heads concatenated: [B, T, D])
    y_t = W_o core_t                                                   [B, T, D]
The recurrent form keeps a cache of the last W keys and values (a fixed-size state, unlike full
attention's growing cache). Learned position embeddings and an MLP per block, as the zoo's attention;
no convolution slot. A token more than W - 1 positions back can reach position t only through
another layer (a 2-layer model sees up to 2(W - 1) back).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mecheval.models.mixers import Mixer, MixerOptions
from mecheval.models.sites import Site


class SlidingWindowOptions(MixerOptions):
    n_heads: int = Field(1, gt=0)
    window: int = Field(8, gt=0, description="W: positions t-W+1..t are attended to")


class SlidingWindowAttention(Mixer):
    label = "sliding-window"
    Options = SlidingWindowOptions
    has_conv = False
    positions = True

    def __init__(self, d_model: int, conv, options: SlidingWindowOptions, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        if d_model % options.n_heads:
            raise ValueError(f"sliding window: d_model={d_model} is not divisible by n_heads={options.n_heads}")
        self.H, self.W = options.n_heads, options.window
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.core_out = Site()
        self.out = nn.Linear(d_model, d_model, bias=False)

    def _heads(self, z: torch.Tensor) -> torch.Tensor:  # [B, T, D] -> [B, H, T, d_h]
        return z.unflatten(-1, (self.H, -1)).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        q, k, v = (self._heads(z) for z in self.qkv(x).chunk(3, dim=-1))
        t = torch.arange(T, device=x.device)
        band = (t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - self.W)  # [T, T]: t-W < s <= t
        core = F.scaled_dot_product_attention(q, k, v, attn_mask=band)  # [B, H, T, d_h]
        return self.out(self.core_out(core.transpose(1, 2).flatten(-2)))

    def init_state(self, batch_size: int, device=None, dtype=None):
        """The last (up to) W keys and values: two tensors [B, H, 0, d_h] growing to [B, H, W, d_h]."""
        empty = torch.zeros(batch_size, self.H, 0, self.d_model // self.H, device=device, dtype=dtype)
        return empty, empty

    def step(self, x_t: torch.Tensor, state):
        q, k, v = (self._heads(z[:, None]) for z in self.qkv(x_t).chunk(3, dim=-1))  # [B, H, 1, d_h]
        keys = torch.cat([state[0], k], dim=2)[:, :, -self.W:]
        values = torch.cat([state[1], v], dim=2)[:, :, -self.W:]
        core = F.scaled_dot_product_attention(q, keys, values)  # [B, H, 1, d_h]
        return self.out(core.transpose(1, 2).flatten(-2)[:, 0]), (keys, values)
