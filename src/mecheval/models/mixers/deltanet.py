"""DeltaNet (Schlag et al., 2021; Yang et al., 2024), as in flash-linear-attention's `DeltaNet` layer
used by the study (defaults: SiLU q/k activation, L2-normalised q and k, β = sigmoid, no gate).

Per head h (H heads of d_h = D / H):
    q, k, v = W_q u, W_k u, W_v u                    [B, T, D] each
    c = conv([q; k; v])                              causal conv of `d_conv` on the 3D channels, i.e. one
                                                     short conv each on q, k, v (site `conv_out`, [B, T, 3D]);
                                                     d_conv 0 removes it (c = [q; k; v])
    q, k, v = SiLU(c) split into heads;  q <- q / (|q| sqrt(d_h)),  k <- k / |k|
    β_t = sigmoid(w_β · u_t)                         [B, T, H]
    S_t = S_{t-1} + β_t k_t (v_t - S_{t-1}^T k_t)^T,  core_t = S_t^T q_t     S: [B, H, d_h, d_h]
                                                     (site `core_out`, heads concatenated: [B, T, D];
                                                     S_t after t: site `state`, `DeltaNetState`)
    y = W_o RMSNorm_{d_h}(core)                      [B, T, D]   (RMSNorm per head, learned scale)
Training runs `ops.dispatch.delta_rule` (on CPU the fused recurrence, else the chunkwise WY/UT form; same
math); the recurrent view steps the conv state and S.
Published: 1 head, short conv 4 (fla's `conv_size`, no conv bias), no bias anywhere.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec
from mecheval.models.norms import RMSNorm
from mecheval.models.ops.delta_rule import (
    delta_rule_state_at,
    delta_rule_state_response,
    delta_rule_states,
    delta_rule_states_response,
    delta_rule_step,
)
from mecheval.models.ops.dispatch import delta_rule, l2_normalize
from mecheval.models.shortconv import ConvSpec, make_conv
from mecheval.models.sites import Site
from mecheval.models.states import MatrixState, StateSite


class DeltaNetOptions(MixerOptions):
    n_heads: int = Field(1, gt=0)
    norm_eps: float = Field(1e-5, gt=0)


@dataclasses.dataclass(frozen=True)
class DeltaNetState(MatrixState):
    """S_t [H, d_h, d_h] after each t (`ops.delta_rule`'s state forms); output: core [B, T, H, d_h]."""

    beta: torch.Tensor  # [B, T, H]
    g: torch.Tensor | None = None  # log α [B, T, H] of the gated delta rule (None: α = 1)

    def _gate(self, rows):
        return None if self.g is None else self.g[rows]

    def _at(self, rows, pos):
        return delta_rule_state_at(self.k[rows], self.v[rows], self.beta[rows], pos, self._gate(rows)).flatten(1)

    def _change(self, rows, pos, delta):
        dS = delta.view(len(rows), *self.k.shape[2:], self.v.shape[3])
        return delta_rule_state_response(self.q[rows], self.k[rows], self.beta[rows], pos, dS, self._gate(rows))

    def _every(self, rows):
        return delta_rule_states(self.k[rows], self.v[rows], self.beta[rows], self._gate(rows)).flatten(2)

    def _change_every(self, rows, delta):
        dS = delta.view(len(rows), delta.shape[1], *self.k.shape[2:], self.v.shape[3])
        return delta_rule_states_response(self.q[rows], self.k[rows], self.beta[rows], dS, self._gate(rows))


class DeltaNet(Mixer):
    def __init__(self, d_model: int, conv: ConvSpec, options: DeltaNetOptions, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.n_heads, self.d_head = options.n_heads, d_model // options.n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.conv = make_conv(conv, 3 * d_model, max_len)
        if self.conv is not None:
            self.conv_out = Site()
        self.b_proj = nn.Linear(d_model, self.n_heads, bias=False)
        self.state = StateSite()
        self.core_out = Site()
        self.o_norm = RMSNorm(self.d_head, eps=options.norm_eps)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def _qkv_beta(self, c: torch.Tensor, u: torch.Tensor):
        """Activated conv output c [..., 3D] and input u [..., D] -> q, k [..., H, d_h], v, β [..., H]."""
        q, k, v = (z.unflatten(-1, (self.n_heads, self.d_head)) for z in F.silu(c).chunk(3, dim=-1))
        return l2_normalize(q, self.d_head**-0.5), l2_normalize(k), v, torch.sigmoid(self.b_proj(u))

    def _out(self, core: torch.Tensor) -> torch.Tensor:  # [..., D] -> [..., D]
        return self.o_proj(self.o_norm(core.unflatten(-1, (self.n_heads, self.d_head))).flatten(-2))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        c = self.qkv(u)
        if self.conv is not None:
            c = self.conv_out(self.conv(c))
        q, k, v, beta = self._qkv_beta(c, u)
        o = self.state(DeltaNetState(delta_rule(q, k, v, beta), q, k, v, beta)).output  # [B, T, H, d_h]
        core = self.core_out(o.flatten(-2))  # [B, T, D]
        return self._out(core)

    def init_state(self, batch_size: int, device=None, dtype=None):
        """(conv state or None, S [B, H, d_h, d_h] zeros)."""
        conv = None if self.conv is None else self.conv.init_state(batch_size, device=device, dtype=dtype)
        return conv, torch.zeros(batch_size, self.n_heads, self.d_head, self.d_head, device=device, dtype=dtype)

    def step(self, u_t: torch.Tensor, state):
        conv_state, S = state
        c = self.qkv(u_t)
        if self.conv is not None:
            c, conv_state = self.conv.step(c, conv_state)
        q, k, v, beta = self._qkv_beta(c, u_t)
        core, S = delta_rule_step(q, k, v, beta, S)
        return self._out(core.flatten(-2)), (conv_state, S)


SPEC = MixerSpec(cls=DeltaNet, options=DeltaNetOptions, default_conv=4, default_mlp=True, default_norm="layernorm")
