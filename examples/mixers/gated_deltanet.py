"""Gated DeltaNet (Yang, Kautz & Hatamizadeh, 2024, "Gated Delta Networks: Improving Mamba2 with Delta
Rule"): a plug-in built only on mecheval's public API (`model.mixer: examples.mixers.gated_deltanet:GatedDeltaNet`).

Per head h (H heads of d_h = D / H), as flash-linear-attention's `GatedDeltaNet` layer:
    q, k, v = W_q u, W_k u, W_v u                 [B, T, D] each
    q, k, v = SiLU(conv([q; k; v]))               causal conv of `d_conv` on the 3D channels (site
                                                  `conv_out`); d_conv 0 removes it
    q <- q / (|q| sqrt(d_h)),  k <- k / |k|       split into heads: [B, T, H, d_h]
    β_t = sigmoid(W_β u_t)                        [B, T, H]  (the delta rule's step size)
    α_t = exp(g_t),  g_t = -exp(A_log) softplus(W_α u_t + b)   [B, T, H]  (Mamba-2's scalar decay per head)
The gated delta rule (eq. 10, here with S = their S^T: [d_k, d_v]), per head:
    S_t = α_t (I - β_t k_t k_t^T) S_{t-1} + β_t k_t v_t^T,   o_t = S_t^T q_t        S: [B, H, d_h, d_h]
α = 1 is DeltaNet; β_t k_t k_t^T = 0 is Mamba-2's SSD: the gate forgets, the delta rule overwrites.
forward uses the exact parallel form (one chunk of the WY/UT representation, sec. 3.3): with
    Γ_ts = exp(Σ_{r=s+1..t} g_r) for s <= t,  A_ts = Γ_ts (k_t · k_s) for s < t (else 0)   [B, H, T, T]
    S_t = Σ_{s<=t} Γ_ts k_s w_s^T  where  w = (I + diag(β) A)^{-1} diag(β) v            (triangular solve)
    o_t = Σ_{s<=t} Γ_ts (q_t · k_s) w_s           (site `core_out`, heads concatenated: [B, T, D])
    y = W_o (RMSNorm_{d_h}(o) ⊙ SiLU(W_g u))      [B, T, D]  (the gated output norm)
O(T² D + T³ H) per example: exact at cpu-scale lengths (fla chunks it for long T). The step form
updates S as written. Defaults: 1 head, short conv 4, an MLP and LayerNorm (as the zoo's DeltaNet).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mecheval.models.mixers import Mixer, MixerOptions
from mecheval.models.shortconv import make_conv
from mecheval.models.sites import Site


class GatedDeltaNetOptions(MixerOptions):
    n_heads: int = Field(1, gt=0)
    norm_eps: float = Field(1e-5, gt=0)


class GatedDeltaNet(Mixer):
    label = "gated-deltanet"
    Options = GatedDeltaNetOptions
    default_conv = 4

    def __init__(self, d_model: int, conv, options: GatedDeltaNetOptions, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        if d_model % options.n_heads:
            raise ValueError(f"gated deltanet: d_model={d_model} is not divisible by n_heads={options.n_heads}")
        self.H, self.d_h = options.n_heads, d_model // options.n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.conv = make_conv(conv, 3 * d_model, max_len)
        if self.conv is not None:
            self.conv_out = Site()
        self.b_proj = nn.Linear(d_model, self.H, bias=False)
        self.a_proj = nn.Linear(d_model, self.H, bias=False)
        self.A_log = nn.Parameter(torch.log(torch.empty(self.H).uniform_(1, 16)))
        dt = torch.exp(torch.rand(self.H) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt), as Mamba-2
        self.core_out = Site()
        self.g_proj = nn.Linear(d_model, d_model, bias=False)
        self.o_norm = nn.RMSNorm(self.d_h, eps=options.norm_eps)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def _heads(self, c: torch.Tensor, u: torch.Tensor):
        """Conv output c [..., 3D], input u [..., D] -> q, k, v [..., H, d_h], β, g (log α) [..., H]."""
        q, k, v = (z.unflatten(-1, (self.H, self.d_h)) for z in F.silu(c).chunk(3, dim=-1))
        q = F.normalize(q, dim=-1) * self.d_h**-0.5
        g = -torch.exp(self.A_log) * F.softplus(self.a_proj(u) + self.dt_bias)
        return q, F.normalize(k, dim=-1), v, torch.sigmoid(self.b_proj(u)), g

    def _out(self, o: torch.Tensor, u: torch.Tensor) -> torch.Tensor:  # o [..., H, d_h], u [..., D] -> [..., D]
        return self.o_proj(self.o_norm(o).flatten(-2) * F.silu(self.g_proj(u)))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        c = self.qkv(u)
        if self.conv is not None:
            c = self.conv_out(self.conv(c))
        q, k, v, beta, g = (z.transpose(1, 2) for z in self._heads(c, u))  # [B, H, T, d_h] / [B, H, T]
        T = u.shape[1]
        cum = g.cumsum(-1)  # [B, H, T]
        lower = torch.ones(T, T, dtype=torch.bool, device=u.device).tril()
        gamma = (cum[..., :, None] - cum[..., None, :]).masked_fill(~lower, float("-inf")).exp()  # Γ [B, H, T, T]
        A = (gamma * (k @ k.transpose(-1, -2))).tril(-1)
        eye = torch.eye(T, dtype=u.dtype, device=u.device)
        w = torch.linalg.solve_triangular(eye + beta[..., None] * A, beta[..., None] * v, upper=False)  # [B, H, T, d_h]
        o = (gamma * (q @ k.transpose(-1, -2))) @ w  # [B, H, T, d_h]
        o = self.core_out(o.transpose(1, 2).flatten(-2))  # [B, T, D]
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
        kS = torch.einsum("bhk,bhkv->bhv", k, S)  # k_t^T S_{t-1}
        S = g.exp()[..., None, None] * (S - beta[..., None, None] * k[..., None] * kS[..., None, :])
        S = S + beta[..., None, None] * k[..., None] * v[..., None, :]
        return self._out(torch.einsum("bhkv,bhk->bhv", S, q), u_t), (conv_state, S)
