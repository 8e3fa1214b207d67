"""Mamba-2 (Dao & Gu, 2024, "Transformers are SSMs"): the SSD layer, a plug-in built only on mecheval's
public API (`model.mixer: examples.mixers.mamba2:Mamba2`).

With D_i = expand · D inner channels in H = D_i / P heads of P channels, N = d_state, one group (B and C
shared by the heads), as `mamba_ssm`'s `Mamba2` layer:
    z, x, B, C, dt = W_in u                      [B, T, D_i], [B, T, D_i], [B, T, N], [B, T, N], [B, T, H]
    x, B, C = SiLU(conv([x; B; C]))              causal conv of `d_conv` over the D_i + 2N channels
                                                 (site `conv_out`); d_conv 0 removes it
    Δ_t = softplus(dt_t + b_Δ)                   [B, T, H]
    a_t = exp(Δ_t A_h),  A_h = -exp(A_log_h)     scalar decay per head (Mamba-1: one per channel and state)
SSD, the recurrence (sec. 3, eq. 1-2, with the scalar-times-identity A of sec. 3.1), per head h:
    S_t = a_t S_{t-1} + Δ_t x_t B_t^T            S: [B, H, P, N], x_t: [P], B_t: [N]   (multi-head state)
    y_t = S_t C_t + D_h x_t                      (site `core_out`, heads concatenated: [B, T, D_i])
and its dual, the masked attention-like form (sec. 4, eq. 16 "SSD = M x", M = L ∘ C B^T) used by forward:
    L_ts = exp(Σ_{r=s+1..t} Δ_r A_h) for s <= t, else 0          [B, H, T, T] (the "1-semiseparable" mask)
    y_t = Σ_{s<=t} L_ts (C_t · B_s) Δ_s x_s + D_h x_t
    out = W_out RMSNorm(y ⊙ SiLU(z))             [B, T, D]   (the gated norm of Mamba-2, sec. 7.2)
The quadratic form costs O(T² D_i) per example: exact and readable at the lengths of the cpu-scale
tasks (mamba_ssm's chunked scan mixes both forms for long T). Init as mamba_ssm: A_h ~ U[1, 16],
softplus(b_Δ) ~ logU[dt_min, dt_max], D = 1. Published block: no MLP, RMSNorm, short conv 4.
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


class Mamba2Options(MixerOptions):
    d_state: int = Field(16, gt=0)
    expand: int = Field(2, gt=0)
    head_dim: int = Field(16, gt=0, description="P, channels per head; must divide expand * d_model")
    dt_min: float = Field(0.001, gt=0)
    dt_max: float = Field(0.1, gt=0)


class Mamba2(Mixer):
    label = "mamba2"
    Options = Mamba2Options
    default_conv = 4
    default_mlp = False
    default_norm = "rmsnorm"

    def __init__(self, d_model: int, conv, options: Mamba2Options, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.d_inner = Di = options.expand * d_model
        if Di % options.head_dim:
            raise ValueError(f"mamba2: expand * d_model = {Di} is not divisible by head_dim={options.head_dim}")
        self.P, self.N, self.H = options.head_dim, options.d_state, Di // options.head_dim
        self.in_proj = nn.Linear(d_model, 2 * Di + 2 * self.N + self.H, bias=False)
        self.conv = make_conv(conv, Di + 2 * self.N, max_len)
        if self.conv is not None:
            self.conv_out = Site()
        self.A_log = nn.Parameter(torch.log(torch.empty(self.H).uniform_(1, 16)))
        dt = torch.exp(torch.rand(self.H) * (math.log(options.dt_max) - math.log(options.dt_min)) + math.log(options.dt_min))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)
        self.D = nn.Parameter(torch.ones(self.H))
        self.core_out = Site()
        self.norm = nn.RMSNorm(Di)
        self.out_proj = nn.Linear(Di, d_model, bias=False)

    def _split(self, u: torch.Tensor):
        """u [..., D] -> z [..., D_i] and the conv's input [x; B; C] [..., D_i + 2N], dt [..., H]."""
        z, xbc, dt = self.in_proj(u).split([self.d_inner, self.d_inner + 2 * self.N, self.H], dim=-1)
        return z, xbc, dt

    def _ssd_inputs(self, xbc: torch.Tensor, dt: torch.Tensor):
        """-> x [..., H, P], B [..., N], C [..., N], Δ [..., H], log a = Δ A [..., H]."""
        x, Bm, Cm = F.silu(xbc).split([self.d_inner, self.N, self.N], dim=-1)
        delta = F.softplus(dt + self.dt_bias)
        return x.unflatten(-1, (self.H, self.P)), Bm, Cm, delta, delta * -torch.exp(self.A_log)

    def _out(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:  # [..., D_i] each -> [..., D]
        return self.out_proj(self.norm(y * F.silu(z)))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        z, xbc, dt = self._split(u)
        if self.conv is not None:
            xbc = self.conv_out(self.conv(xbc))
        x, Bm, Cm, delta, log_a = self._ssd_inputs(xbc, dt)  # x [B, T, H, P]
        T = u.shape[1]
        cum = log_a.cumsum(1).transpose(1, 2)  # [B, H, T]: Σ_{r<=t} Δ_r A
        causal = torch.ones(T, T, dtype=torch.bool, device=u.device).tril()
        L = (cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # [B, H, T, T]
        M = L * torch.einsum("btn,bsn->bts", Cm, Bm)[:, None]  # L ∘ C B^T
        y = torch.einsum("bhts,bshp->bthp", M, delta[..., None] * x) + self.D[:, None] * x  # [B, T, H, P]
        return self._out(self.core_out(y.flatten(-2)), z)

    def init_state(self, batch_size: int, device=None, dtype=None):
        """(conv state or None, S [B, H, P, N] zeros)."""
        conv = None if self.conv is None else self.conv.init_state(batch_size, device=device, dtype=dtype)
        return conv, torch.zeros(batch_size, self.H, self.P, self.N, device=device, dtype=dtype)

    def step(self, u_t: torch.Tensor, state):
        conv_state, S = state
        z, xbc, dt = self._split(u_t)
        if self.conv is not None:
            xbc, conv_state = self.conv.step(xbc, conv_state)
        x, B_t, C_t, delta, log_a = self._ssd_inputs(xbc, dt)  # x [B, H, P], B_t, C_t [B, N], [B, H]
        S = log_a.exp()[..., None, None] * S + (delta[..., None] * x)[..., None] * B_t[:, None, None, :]
        y = torch.einsum("bhpn,bn->bhp", S, C_t) + self.D[:, None] * x
        return self._out(y.flatten(-2), z), (conv_state, S)
