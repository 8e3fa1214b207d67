"""Mamba-2 (Dao & Gu, 2024, "Transformers are SSMs"): the SSD layer, as `mamba_ssm`'s `Mamba2` with one group.

With D_i = expand · D inner channels in H = D_i / P heads of P channels, N = d_state, one group (B and C
shared by the heads):
    z, x, B, C, dt = W_in u                      [B, T, D_i], [B, T, D_i], [B, T, N], [B, T, N], [B, T, H]
    x, B, C = SiLU(conv([x; B; C]))              causal conv of `d_conv` over the D_i + 2N channels
                                                 (site `conv_out`); d_conv 0 removes it
    Δ_t = softplus(dt_t + b_Δ)                   [B, T, H]
    a_t = exp(Δ_t A_h),  A_h = -exp(A_log_h)     a scalar decay per head (Mamba-1: one per channel and state)
SSD, the recurrence (sec. 3, eq. 1-2, with the scalar-times-identity A of sec. 3.1), per head h:
    S_t = a_t S_{t-1} + Δ_t x_t B_t^T            S: [B, H, P, N], x_t: [P], B_t: [N]   (site `state`,
                                                 `SSDState`: S_t after t, [H · P · N] per position)
    y_t = S_t C_t + D_h x_t                      (site `core_out`, heads concatenated: [B, T, D_i])
    out = W_out RMSNorm(y ⊙ SiLU(z))             [B, T, D]   (the gated norm of Mamba-2, sec. 7.2)
forward runs the chunked dual form `ops.ssd.ssd` (sec. 6: within a chunk the masked form
y_t = Σ_{s<=t} exp(Σ_{r=s+1..t} Δ_r A_h) (C_t · B_s) Δ_s x_s + D_h x_t, across chunks the state); the
recurrent view steps the conv state and S as written. Init as mamba_ssm: A_h ~ U[1, 16],
softplus(b_Δ) ~ logU[dt_min, dt_max], D = 1. Published block: no MLP, RMSNorm, short conv 4.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec
from mecheval.models.ops.ssd import (
    ssd,
    ssd_state_at,
    ssd_state_response,
    ssd_states,
    ssd_states_response,
    ssd_step,
)
from mecheval.models.shortconv import ConvSpec, make_conv
from mecheval.models.sites import Site
from mecheval.models.states import StateSite, StateValue


class Mamba2Options(MixerOptions):
    d_state: int = Field(16, gt=0)
    expand: int = Field(2, gt=0)
    head_dim: int = Field(16, gt=0, description="P, channels per head; must divide expand * d_model")
    dt_min: float = Field(0.001, gt=0)
    dt_max: float = Field(0.1, gt=0)

    def check(self, d_model: int) -> None:
        super().check(d_model)
        if (self.expand * d_model) % self.head_dim:
            raise ValueError(f"head_dim={self.head_dim} does not divide expand * d_model = {self.expand * d_model}")


@dataclasses.dataclass(frozen=True)
class SSDState(StateValue):
    """S_t [H, P, N] after each t (`ops.ssd`'s state forms), from the SSD's inputs; output: y [B, T, H, P]
    without the skip D x."""

    x: torch.Tensor  # the weighted inputs [B, T, H, P, R]
    Bm: torch.Tensor  # [B, T, H, N, R]
    Cm: torch.Tensor  # [B, T, H, N]
    log_a: torch.Tensor  # [B, T, H]

    @property
    def size(self) -> int:
        return self.x.shape[2] * self.x.shape[3] * self.Bm.shape[3]

    @property
    def work(self) -> int:
        return self.x.shape[1] * (self.size + self.x[0, 0].numel() + self.Bm[0, 0].numel())

    def _at(self, rows, pos):
        return ssd_state_at(self.x[rows], self.Bm[rows], self.log_a[rows], pos).flatten(1)

    def _change(self, rows, pos, delta):
        return ssd_state_response(self.Cm[rows], self.log_a[rows], pos, delta.view(len(rows), *self._shape))

    def _every(self, rows):
        return ssd_states(self.x[rows], self.Bm[rows], self.log_a[rows]).flatten(2)

    def _change_every(self, rows, delta):
        return ssd_states_response(self.Cm[rows], self.log_a[rows], delta.view(*delta.shape[:2], *self._shape))

    @property
    def _shape(self) -> tuple[int, int, int]:
        return self.x.shape[2], self.x.shape[3], self.Bm.shape[3]


def dt_bias_init(n: int, dt_min: float, dt_max: float) -> torch.Tensor:
    """b_Δ [n] with softplus(b_Δ) ~ logU[dt_min, dt_max] (mamba_ssm's init)."""
    dt = torch.exp(torch.rand(n) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    return dt + torch.log(-torch.expm1(-dt))  # softplus^{-1}(dt)


class Mamba2(Mixer):
    label = "mamba2"
    Options = Mamba2Options
    default_conv = 4
    default_mlp = False
    default_norm = "rmsnorm"

    def __init__(self, d_model: int, conv: ConvSpec, options: Mamba2Options, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.d_inner = Di = options.expand * d_model
        self.P, self.N, self.H = options.head_dim, options.d_state, Di // options.head_dim
        self.sizes = self._projections()
        self.in_proj = nn.Linear(d_model, sum(self.sizes), bias=False)
        self.conv = make_conv(conv, Di + 2 * self.N, max_len)
        if self.conv is not None:
            self.conv_out = Site()
        self.A_log = nn.Parameter(torch.log(torch.empty(self.H).uniform_(1, 16)))
        self.dt_bias = nn.Parameter(dt_bias_init(self.H, options.dt_min, options.dt_max))
        self.D = nn.Parameter(torch.ones(self.H))
        self._add_before_state()
        self.state = StateSite()
        self.core_out = Site()
        self.norm = nn.RMSNorm(Di)
        self.out_proj = nn.Linear(Di, d_model, bias=False)

    def _projections(self) -> list[int]:
        """The sizes W_in projects to: z, [x; B; C], dt."""
        return [self.d_inner, self.d_inner + 2 * self.N, self.H]

    def _add_before_state(self) -> None:
        """Modules between the gates and the state: none here (Mamba-3 adds its B/C norms and biases and its
        sites `rotary` and `two_token`, which must register before `state`: sites register in the order forward visits them)."""

    def _split(self, u: torch.Tensor):
        """u [..., D] -> z [..., D_i], the conv's input [x; B; C] [..., D_i + 2N], dt [..., H]."""
        return self.in_proj(u).split(self.sizes, dim=-1)

    def _ssd_inputs(self, xbc: torch.Tensor, dt: torch.Tensor):
        """-> x [..., H, P], the SSD's input Δ x [..., H, P, 1] and B [..., H, N, 1], C [..., H, N],
        log a = Δ A [..., H]."""
        x, Bm, Cm = F.silu(xbc).split([self.d_inner, self.N, self.N], dim=-1)
        delta = F.softplus(dt + self.dt_bias)
        x = x.unflatten(-1, (self.H, self.P))
        heads = (*Bm.shape[:-1], self.H, self.N)
        Bm, Cm = Bm.unsqueeze(-2).expand(heads), Cm.unsqueeze(-2).expand(heads)
        return x, (delta[..., None] * x)[..., None], Bm[..., None], Cm, delta * -torch.exp(self.A_log)

    def _core(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """y, x [..., H, P] -> the core y + D x, heads concatenated [..., D_i]."""
        return (y + self.D[:, None] * x).flatten(-2)

    def _out(self, core: torch.Tensor, z: torch.Tensor) -> torch.Tensor:  # [..., D_i] each -> [..., D]
        return self.out_proj(self.norm(core * F.silu(z)))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        z, xbc, dt = self._split(u)
        if self.conv is not None:
            xbc = self.conv_out(self.conv(xbc))
        x, xw, Bm, Cm, log_a = self._ssd_inputs(xbc, dt)
        y = self.state(SSDState(ssd(xw, Bm, Cm, log_a), xw, Bm, Cm, log_a)).output  # [B, T, H, P]
        return self._out(self.core_out(self._core(y, x)), z)

    def init_state(self, batch_size: int, device=None, dtype=None):
        """(conv state or None, S [B, H, P, N] zeros)."""
        conv = None if self.conv is None else self.conv.init_state(batch_size, device=device, dtype=dtype)
        return conv, torch.zeros(batch_size, self.H, self.P, self.N, device=device, dtype=dtype)

    def step(self, u_t: torch.Tensor, state):
        conv_state, S = state
        z, xbc, dt = self._split(u_t)
        if self.conv is not None:
            xbc, conv_state = self.conv.step(xbc, conv_state)
        x, xw, B_t, C_t, log_a = self._ssd_inputs(xbc, dt)
        y, S = ssd_step(xw, B_t, C_t, log_a, S)
        return self._out(self._core(y, x), z), (conv_state, S)


SPEC = MixerSpec.of(Mamba2, "mamba2")
