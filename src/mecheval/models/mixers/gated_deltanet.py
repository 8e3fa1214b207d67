"""Gated DeltaNet (Yang, Kautz & Hatamizadeh, 2025, "Gated Delta Networks: Improving Mamba2 with Delta
Rule"), as flash-linear-attention's `GatedDeltaNet` layer.

Per head h (H heads of d_h = D / H):
    q, k, v = W_q u, W_k u, W_v u                 [B, T, D] each
    q, k, v = SiLU(conv([q; k; v]))               causal conv of `d_conv` on the 3D channels (site
                                                  `conv_out`); d_conv 0 removes it (then SiLU([q; k; v]))
    q <- q / (|q| sqrt(d_h)),  k <- k / |k|       split into heads: [B, T, H, d_h]
    β_t = sigmoid(W_β u_t)                        [B, T, H]  (the delta rule's step size)
    α_t = exp(g_t),  g_t = -exp(A_log) softplus(W_α u_t + b_Δ)   [B, T, H]  (Mamba-2's scalar decay per head)
The gated delta rule (eq. 10, here with S = their S^T: [d_k, d_v]), per head:
    S_t = α_t (I - β_t k_t k_t^T) S_{t-1} + β_t k_t v_t^T,   o_t = S_t^T q_t     S: [B, H, d_h, d_h]
                                                  (site `state`, `deltanet.DeltaNetState` with its gate)
    y = W_o (RMSNorm_{d_h}(o) ⊙ SiLU(W_g u))      [B, T, D]  (the gated output norm; o: site `core_out`,
                                                  heads concatenated [B, T, D])
α = 1 is DeltaNet; β_t k_t k_t^T = 0 is Mamba-2's SSD: the gate forgets, the delta rule overwrites.
forward runs the chunkwise WY/UT form `ops.delta_rule.delta_rule` with the gate (sec. 3.3); the recurrent
view steps the conv state and S as written. Init of the gate as Mamba-2's: A ~ U[1, 16], softplus(b_Δ) ~
logU[0.001, 0.1]. Defaults: 1 head, short conv 4, an MLP and LayerNorm (the zoo's DeltaNet block).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec
from mecheval.models.mixers.deltanet import DeltaNetState
from mecheval.models.mixers.mamba2 import dt_bias_init
from mecheval.models.ops.delta_rule import delta_rule_step
from mecheval.models.ops.dispatch import delta_rule, l2_normalize
from mecheval.models.shortconv import ConvSpec, make_conv
from mecheval.models.sites import Site
from mecheval.models.states import StateSite


class GatedDeltaNetOptions(MixerOptions):
    n_heads: int = Field(1, gt=0)
    norm_eps: float = Field(1e-5, gt=0)


class GatedDeltaNet(Mixer):
    label = "gated-deltanet"
    Options = GatedDeltaNetOptions
    default_conv = 4
    default_mlp = True
    default_norm = "layernorm"

    def __init__(self, d_model: int, conv: ConvSpec, options: GatedDeltaNetOptions, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.H, self.d_h = options.n_heads, d_model // options.n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.conv = make_conv(conv, 3 * d_model, max_len)
        if self.conv is not None:
            self.conv_out = Site()
        self.b_proj = nn.Linear(d_model, self.H, bias=False)
        self.a_proj = nn.Linear(d_model, self.H, bias=False)
        self.A_log = nn.Parameter(torch.log(torch.empty(self.H).uniform_(1, 16)))
        self.dt_bias = nn.Parameter(dt_bias_init(self.H, 0.001, 0.1))
        self.state = StateSite()
        self.core_out = Site()
        self.g_proj = nn.Linear(d_model, d_model, bias=False)
        self.o_norm = nn.RMSNorm(self.d_h, eps=options.norm_eps)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def _heads(self, c: torch.Tensor, u: torch.Tensor):
        """Conv output c [..., 3D], input u [..., D] -> q, k, v [..., H, d_h], β, g = log α [..., H]."""
        q, k, v = (z.unflatten(-1, (self.H, self.d_h)) for z in F.silu(c).chunk(3, dim=-1))
        g = -torch.exp(self.A_log) * F.softplus(self.a_proj(u) + self.dt_bias)
        return l2_normalize(q, self.d_h**-0.5), l2_normalize(k), v, torch.sigmoid(self.b_proj(u)), g

    def _out(self, o: torch.Tensor, u: torch.Tensor) -> torch.Tensor:  # o [..., H, d_h], u [..., D] -> [..., D]
        return self.o_proj(self.o_norm(o).flatten(-2) * F.silu(self.g_proj(u)))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        c = self.qkv(u)
        if self.conv is not None:
            c = self.conv_out(self.conv(c))
        q, k, v, beta, g = self._heads(c, u)
        o = self.state(DeltaNetState(delta_rule(q, k, v, beta, g), q, k, v, beta, g)).output  # [B, T, H, d_h]
        o = self.core_out(o.flatten(-2))  # [B, T, D]
        return self._out(o.unflatten(-1, (self.H, self.d_h)), u)

    def init_state(self, batch_size: int, device=None, dtype=None):
        """(conv state or None, S [B, H, d_h, d_h] zeros)."""
        conv = None if self.conv is None else self.conv.init_state(batch_size, device=device, dtype=dtype)
        return conv, torch.zeros(batch_size, self.H, self.d_h, self.d_h, device=device, dtype=dtype)

    def step(self, u_t: torch.Tensor, state):
        conv_state, S = state
        c = self.qkv(u_t)
        if self.conv is not None:
            c, conv_state = self.conv.step(c, conv_state)
        q, k, v, beta, g = self._heads(c, u_t)  # [B, H, d_h] / [B, H]
        o, S = delta_rule_step(q, k, v, beta, S, g)
        return self._out(o, u_t), (conv_state, S)


SPEC = MixerSpec.of(GatedDeltaNet, "gated-deltanet")
