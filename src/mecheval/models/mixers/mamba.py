"""Mamba (Gu & Dao, 2023): a gated selective SSM, as in `mamba_ssm`'s `Mamba` (mamba_simple) used by the study.

With D_i = expand · D inner channels, N = d_state, R = dt_rank:
    x, z = W_in u                                   [B, T, D_i] each
    c = conv(x) (+ b_c)                             causal conv of `d_conv` (site `conv_out`, [B, T, D_i]);
                                                    d_conv 0 removes it (c = x), as the study's ablation;
                                                    b_c [D_i] only with `conv_bias` (mamba_ssm's default)
    x' = SiLU(c)
    Δ_t = softplus(W_Δ (W_r x'_t) + b_Δ)              [B, T, D_i]   (W_r: D_i -> R, W_Δ: R -> D_i)
    B_t = W_B x'_t,  C_t = W_C x'_t                 [B, T, N]     (input-dependent: the "selection")
    h_t = exp(Δ_t ⊙ A) ⊙ h_{t-1} + (Δ_t ⊙ x'_t) B_t,  A = -exp(A_log)   h: [B, D_i, N]   (ZOH, eq. 2, 4)
    core_t = C_t · h_t + D ⊙ x'_t                     (site `core_out`, [B, T, D_i])
                                                    h_t, the state after t: site `state` ([D_i · N] per
                                                    position; `MambaState`, never all positions at once)
    y = W_out (core ⊙ SiLU(z))                      [B, T, D]
Training runs `ops.dispatch.selective_scan` (the fused CPU kernel by default, else the chunked
pure-PyTorch scan; same math); the recurrent view steps the conv state and h.
Published (paper_setup.md): d_state 16, d_conv 4, expand 2, dt_rank ⌈D/16⌉, block RMSNorm -> Mamba ->
residual with no MLP. Init as mamba_ssm: A = 1..N per channel (S4D-real), D = 1, Δ bias so that
softplus(b_Δ) ~ logU[dt_min, dt_max], W_Δ ~ U(±R^-1/2). Difference by default: no bias but b_Δ (the Δ
bias is part of the SSM), not even in the conv, so d_conv means one thing in every mixer; `conv_bias:
true` adds mamba_ssm's conv bias b_c ~ U(±k^-1/2) (nn.Conv1d's init, k = d_conv). See
docs/mamba-published-scale.md for the other differences from the study's code.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec
from mecheval.models.ops.dispatch import selective_scan
from mecheval.models.ops.selective_scan import (
    selective_scan_state_at,
    selective_scan_state_response,
    selective_scan_states,
    selective_scan_states_response,
    selective_scan_step,
)
from mecheval.models.shortconv import ConvSpec, make_conv, short_conv_bias
from mecheval.models.sites import Site
from mecheval.models.states import StateSite, StateValue


class MambaOptions(MixerOptions):
    d_state: int = Field(16, gt=0)
    expand: int = Field(2, gt=0)
    dt_rank: int | None = Field(None, gt=0, description="None: ceil(d_model / 16)")
    dt_min: float = Field(0.001, gt=0)
    dt_max: float = Field(0.1, gt=0)
    dt_init_floor: float = Field(1e-4, gt=0)
    conv_bias: bool = Field(False, description="a bias after the short conv, as mamba_ssm's conv1d")


@dataclasses.dataclass(frozen=True)
class MambaState(StateValue):
    """h_t [Di, N] after each t, from the scan's inputs (`ops.selective_scan`'s closed forms); output: y."""

    u: torch.Tensor  # x' [B, T, Di]
    delta: torch.Tensor  # [B, T, Di]
    A: torch.Tensor  # [Di, N]
    Bm: torch.Tensor  # [B, T, N]
    Cm: torch.Tensor  # [B, T, N]

    @property
    def size(self) -> int:
        return self.A.numel()

    @property
    def work(self) -> int:
        return self.u.shape[1] * self.A.numel()

    def _at(self, rows, pos):
        return selective_scan_state_at(self.u[rows], self.delta[rows], self.A, self.Bm[rows], pos).flatten(1)

    def _change(self, rows, pos, delta):
        return selective_scan_state_response(self.delta[rows], self.A, self.Cm[rows], pos, delta.view(-1, *self.A.shape))

    def _every(self, rows):
        return selective_scan_states(self.u[rows], self.delta[rows], self.A, self.Bm[rows]).flatten(2)

    def _change_every(self, rows, delta):
        dh = delta.view(len(rows), delta.shape[1], *self.A.shape)
        return selective_scan_states_response(self.delta[rows], self.A, self.Cm[rows], dh)


class Mamba(Mixer):
    def __init__(self, d_model: int, conv: ConvSpec, options: MambaOptions, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        if options.dt_min > options.dt_max:
            raise ValueError(f"mamba dt_min={options.dt_min} > dt_max={options.dt_max}")
        self.d_inner = Di = options.expand * d_model
        self.d_state = N = options.d_state
        self.dt_rank = R = options.dt_rank or math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, 2 * Di, bias=False)
        self.conv = make_conv(conv, Di, max_len)
        if self.conv is not None:
            self.conv_out = Site()
        self.conv_bias = short_conv_bias(self.conv, conv, "mamba") if options.conv_bias else None
        self.x_proj = nn.Linear(Di, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, Di, bias=True)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(Di, 1))  # [Di, N]
        self.D = nn.Parameter(torch.ones(Di))
        self.out_proj = nn.Linear(Di, d_model, bias=False)
        self.state = StateSite()
        self.core_out = Site()
        self._init_dt(options)

    @torch.no_grad()
    def _init_dt(self, o: MambaOptions) -> None:
        nn.init.uniform_(self.dt_proj.weight, -(self.dt_rank**-0.5), self.dt_rank**-0.5)
        log_dt = torch.rand(self.d_inner) * (math.log(o.dt_max) - math.log(o.dt_min)) + math.log(o.dt_min)
        dt = torch.exp(log_dt).clamp(min=o.dt_init_floor)
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)

    def _selection(self, x: torch.Tensor):
        """x' [..., Di] -> Δ [..., Di], B [..., N], C [..., N]."""
        r, Bm, Cm = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        return F.softplus(self.dt_proj(r)), Bm, Cm

    def _conv(self, x: torch.Tensor) -> torch.Tensor:
        """The conv and its bias if any: [B, T, Di] -> [B, T, Di]."""
        c = self.conv(x)
        return c if self.conv_bias is None else c + self.conv_bias

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        x, z = self.in_proj(u).chunk(2, dim=-1)  # [B, T, Di] each
        if self.conv is not None:
            x = self.conv_out(self._conv(x))
        x = F.silu(x)
        delta, Bm, Cm = self._selection(x)
        A = -torch.exp(self.A_log)
        y = self.state(MambaState(selective_scan(x, delta, A, Bm, Cm, self.D), x, delta, A, Bm, Cm)).output
        core = self.core_out(y)
        return self.out_proj(core * F.silu(z))

    def init_state(self, batch_size: int, device=None, dtype=None):
        """(conv state or None, h [B, Di, N] zeros)."""
        conv = None if self.conv is None else self.conv.init_state(batch_size, device=device, dtype=dtype)
        return conv, torch.zeros(batch_size, self.d_inner, self.d_state, device=device, dtype=dtype)

    def step(self, u_t: torch.Tensor, state):
        conv_state, h = state
        x, z = self.in_proj(u_t).chunk(2, dim=-1)  # [B, Di] each
        if self.conv is not None:
            x, conv_state = self.conv.step(x, conv_state)
            if self.conv_bias is not None:
                x = x + self.conv_bias
        x = F.silu(x)
        delta, B_t, C_t = self._selection(x)
        core, h = selective_scan_step(x, delta, -torch.exp(self.A_log), B_t, C_t, self.D, h)
        return self.out_proj(core * F.silu(z)), (conv_state, h)


SPEC = MixerSpec(cls=Mamba, options=MambaOptions, default_conv=4, default_mlp=False, default_norm="rmsnorm")
