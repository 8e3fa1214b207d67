"""Based linear attention (Arora et al., 2024), as in zoology's `Based` (the study's layer 1 of Based).

Per head h, with feature dimension F (published: F = 8, 1 head):
    q_t = W_q x_t,  k_t = W_k x_t  [B, T, H, F];   v_t = W_v x_t  [B, T, H, D/H]
    φ(x) = [1, x / F^{1/4}, vec(x x^T) / (√2 √F)]      [1 + F + F^2]: 2nd-order Taylor map of exp, so
    φ(q)·φ(k) = 1 + q·k/√F + (q·k)^2 / (2F) ≈ exp(q·k/√F)   (always >= 1/2: the normaliser is safe)
    core_t = sum_{s <= t} (φ(q_t)·φ(k_s)) v_s / (sum_{s <= t} φ(q_t)·φ(k_s) + eps)
                                                   (site `core_out`, heads concatenated: [B, T, D];
                                                   the running sums after t: site `state`, `BasedState`)
    y_t = W_o core_t                               [B, T, D]
No sliding window and no convolution of its own (the short conv of the Based hybrid is layer 0's
BaseConv), so `d_conv` must be 0. Training uses the chunked form of
`mecheval.models.ops.linear_attention`; the recurrent view keeps the running sums
S = sum_s φ(k_s) v_s^T [B, H, 1+F+F^2, D/H] and z = sum_s φ(k_s) [B, H, 1+F+F^2].
"""

from __future__ import annotations

import dataclasses
import math

import torch
from pydantic import Field
from torch import nn

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec
from mecheval.models.ops.linear_attention import (
    causal_linear_attention,
    linear_attention_first_order,
    linear_attention_state_at,
    linear_attention_state_response,
    linear_attention_states,
    linear_attention_states_response,
)
from mecheval.models.shortconv import ConvSpec
from mecheval.models.sites import Site
from mecheval.models.states import StateSite, StateValue


class BasedOptions(MixerOptions):
    feature_dim: int = Field(8, gt=0)  # F: query/key width per head before the feature map
    n_heads: int = Field(1, gt=0)
    eps: float = Field(1e-12, gt=0)  # > 0: zero-padded steps of the chunked form divide 0 by eps
    chunk_size: int = Field(64, gt=0)  # speed only: the chunked form computes the same result


def taylor_features(x: torch.Tensor) -> torch.Tensor:
    """φ(x) for x [..., F] -> [..., 1 + F + F^2] (see module docstring)."""
    dim = x.shape[-1]
    x2 = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2) / math.sqrt(2 * dim)
    return torch.cat([torch.ones_like(x[..., :1]), x / dim**0.25, x2], dim=-1)


@dataclasses.dataclass(frozen=True)
class BasedState(StateValue):
    """The running sums (S_t [H, P, D/H], z_t [H, P]) after each t, concatenated per head; output: core
    [B, H, T, D/H]. The normaliser makes the output non-linear in the state: a change is recomputed."""

    q: torch.Tensor  # φ(q) [B, H, T, P]
    k: torch.Tensor  # φ(k) [B, H, T, P]
    v: torch.Tensor  # [B, H, T, D/H]
    eps: float

    @property
    def size(self) -> int:
        return self.k.shape[1] * self.k.shape[3] * (self.v.shape[3] + 1)

    @property
    def work(self) -> int:
        return self.k.shape[1] * self.k.shape[2] * (self.k.shape[2] + self.k.shape[3] + self.v.shape[3])

    def _at(self, rows, pos):
        S, z = linear_attention_state_at(self.k[rows], self.v[rows], pos)
        return torch.cat([S, z.unsqueeze(-1)], dim=-1).flatten(1)

    def _change(self, rows, pos, delta):
        d = delta.view(len(rows), self.k.shape[1], self.k.shape[3], self.v.shape[3] + 1)
        return linear_attention_state_response(self.q[rows], self.k[rows], self.v[rows], pos, d[..., :-1], d[..., -1], self.eps)

    @property
    def steps(self) -> int:
        return self.output.shape[2]

    def _every(self, rows):
        S, z = linear_attention_states(self.k[rows], self.v[rows])  # [n, H, T, P, Dv], [n, H, T, P]
        return torch.cat([S, z.unsqueeze(-1)], dim=-1).transpose(1, 2).flatten(2)

    def _change_every(self, rows, delta):
        d = delta.view(len(rows), delta.shape[1], self.k.shape[1], self.k.shape[3], -1).transpose(1, 2)
        return linear_attention_states_response(self.q[rows], self.k[rows], self.v[rows], d[..., :-1], d[..., -1], self.eps)

    def _first_order(self, source, rows, grads):
        """The closed form of `ops.linear_attention` (the sums carry no decay: the T × T form, no state)."""
        q = self.q[rows]
        return linear_attention_first_order(q, self.k[rows], self.v[rows], source.k[rows], source.v[rows],
                                            [g.to(q.dtype) for g in grads], self.eps)

    @property
    def work_first_order(self) -> int:
        return self.work


class Based(Mixer):
    has_conv = False

    def __init__(self, d_model: int, conv: ConvSpec, options: BasedOptions, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.n_heads, self.feature_dim = options.n_heads, options.feature_dim
        self.eps, self.chunk_size = options.eps, options.chunk_size
        self.proj_q = nn.Linear(d_model, options.n_heads * options.feature_dim, bias=False)
        self.proj_k = nn.Linear(d_model, options.n_heads * options.feature_dim, bias=False)
        self.proj_v = nn.Linear(d_model, d_model, bias=False)
        self.state = StateSite()
        self.core_out = Site()
        self.out = nn.Linear(d_model, d_model, bias=False)

    def _qkv(self, x: torch.Tensor):
        """x [..., D] -> φ(q), φ(k) [..., H, 1+F+F^2] and v [..., H, D/H]."""
        heads = x.shape[:-1] + (self.n_heads, -1)
        q, k = (taylor_features(p(x).view(heads)) for p in (self.proj_q, self.proj_k))
        return q, k, self.proj_v(x).view(heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = (z.transpose(1, 2) for z in self._qkv(x))  # [B, H, T, *]
        core = causal_linear_attention(q, k, v, chunk_size=self.chunk_size, eps=self.eps)
        core = self.state(BasedState(core, q, k, v, self.eps)).output  # [B, H, T, D/H]
        return self.out(self.core_out(core.transpose(1, 2).reshape(B, T, D)))

    def init_state(self, batch_size: int, device=None, dtype=None):
        """(S [B, H, 1+F+F^2, D/H], z [B, H, 1+F+F^2]), zero."""
        P, dv = 1 + self.feature_dim + self.feature_dim**2, self.d_model // self.n_heads
        S = torch.zeros(batch_size, self.n_heads, P, dv, device=device, dtype=dtype)
        return S, torch.zeros(batch_size, self.n_heads, P, device=device, dtype=dtype)

    def step(self, x_t: torch.Tensor, state):
        S, z = state
        q, k, v = self._qkv(x_t)  # [B, H, P], [B, H, P], [B, H, D/H]
        S = S + k.unsqueeze(-1) * v.unsqueeze(-2)
        z = z + k
        core = (q.unsqueeze(-1) * S).sum(-2) / ((q * z).sum(-1, keepdim=True) + self.eps)
        return self.out(core.reshape(x_t.shape)), (S, z)


SPEC = MixerSpec(
    cls=Based, options=BasedOptions, default_conv=0, default_mlp=True, default_norm="layernorm"
)
