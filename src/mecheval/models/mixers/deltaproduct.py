"""DeltaProduct (Siems et al., 2025, "DeltaProduct: Improving State-Tracking in Linear RNNs via Householder
Products"), and Gated DeltaProduct (`gate: true`), as flash-linear-attention's `GatedDeltaProduct` layer.

Per head (H heads of d_h = D / H; `mixers.dplr`'s frame), n = n_householder keys, values and step sizes per token:
    q, k_1..n, v_1..n = W u                         [B, T, D] and [B, T, n D] twice
    c = SiLU(conv([q; k; v]))                       the shared short-conv slot on the (1 + 2n) D channels (site
                                                    `conv_out`; d_conv 0 removes the conv, the SiLU stays)
    q <- q / (|q| √d_h),  k_j <- k_j / |k_j|        split into heads
    β_{t,j} = 2 σ(w_{β,j} · u_t)                     in (0, 2): negative eigenvalues allowed (`allow_neg_eigval`);
                                                    written min(β, 1) + r, r = max(β - 1, 0) [B, T, n H] passing
                                                    the site `reflection` (exactly β: zeroing r takes the
                                                    negative eigenvalues away, β <- min(β, 1))
The state takes n delta-rule steps per token, a product of n generalised Householder transitions:
    S_{t,0} = α_t S_{t-1}     (α_t = exp(-e^{A} softplus(w_α · u_t + b)), Gated DeltaProduct; α_t = 1 otherwise)
    S_{t,j} = (I - β_{t,j} k_{t,j} k_{t,j}^T) S_{t,j-1} + β_{t,j} k_{t,j} v_{t,j}^T,    j = 1..n
    S_t = S_{t,n} = (Π_{j=n..1} H_{t,j}) α_t S_{t-1} + Σ_j (Π_{i=n..j+1} H_{t,i}) β_{t,j} k_{t,j} v_{t,j}^T,
                    H_{t,j} = I - β_{t,j} k_{t,j} k_{t,j}^T   (the paper's eq.: a product of n Householder-like factors)
    o_t = S_t^T q_t                                  S: [B, H, d_h, d_h] (site `state`: S_t; `core_out`: o)
    y = W_o (RMSNorm_{d_h}(o) ⊙ SiLU(W_g u))         [B, T, D]
The n steps are T n steps of `ops.dplr` (w = 1 but α_t at each token's first step, a = k_{t,j},
b = -w β_{t,j} k_{t,j}, written key β_{t,j} k_{t,j}; q read only at the last step), as fla's recurrent mode
runs them. n = 1 with β in (0, 1) (`allow_neg_eigval: false`) is DeltaNet's core. Defaults as fla's layer: n = 2, β in (0, 2), short conv 4, output gate; here 1 head of D (the
zoo's DeltaNet) and v as wide as k (fla: expand_v 2), and ungated (fla's use_forget_gate True); the gate's
A ~ U[1, 16] as Mamba-2 (fla: U[0, 16]).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mecheval.models.mixers.base import MixerOptions, MixerSpec
from mecheval.models.mixers.dplr import DPLRMixer, GatedOutput
from mecheval.models.ops.dispatch import l2_normalize
from mecheval.models.ops.dplr import DPLRInputs
from mecheval.models.shortconv import ConvSpec


class DeltaProductOptions(MixerOptions):
    n_heads: int = Field(1, gt=0)
    n_householder: int = Field(2, gt=0, description="n: delta-rule steps per token",
                               json_schema_extra={"ablation": "n_h = {:g}"})
    allow_neg_eigval: bool = Field(True, description="β in (0, 2) instead of (0, 1)",
                                   json_schema_extra={"ablation": "no negative eigenvalues"})
    gate: bool = Field(False, description="Gated DeltaProduct: a decay α_t per head and token",
                       json_schema_extra={"ablation": "gated"})
    norm_eps: float = Field(1e-5, gt=0)


class DeltaProduct(DPLRMixer):
    def __init__(self, d_model: int, conv: ConvSpec, options: DeltaProductOptions, layer_idx: int, max_len: int):
        H, n = options.n_heads, options.n_householder
        d_h = d_model // H
        super().__init__(d_model, conv, options, layer_idx, max_len, channels=(1 + 2 * n) * d_model,
                         heads=(H, d_h, d_h), substeps=n, terms=("reflection",) if options.allow_neg_eigval else ())
        self.qkv = nn.Linear(d_model, (1 + 2 * n) * d_model, bias=False)
        self.b_proj = nn.Linear(d_model, n * H, bias=False)
        self.beta_max = 2.0 if options.allow_neg_eigval else 1.0
        if options.gate:
            self.a_proj = nn.Linear(d_model, H, bias=False)
            self.A_log = nn.Parameter(torch.log(torch.empty(H).uniform_(1, 16)))
            dt = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt), as Mamba-2
        else:
            self.a_proj = None
        self.out = GatedOutput(d_model, H, d_h, options.norm_eps)

    def _project(self, u, shift):
        return self.qkv(u)

    def _recurrence(self, c, u, shift):
        """-> the T n steps: step t n + j - 1 is the j-th delta step of token t."""
        n, H, d = self.substeps, self.n_heads, self.d_k
        q, k, v = F.silu(c).split([H * d, n * H * d, n * H * d], dim=-1)
        q = l2_normalize(q.unflatten(-1, (H, d)), d**-0.5)
        k = l2_normalize(k.unflatten(-1, (n, H, d))).flatten(1, 2)  # [B, T n, H, d]
        v = v.unflatten(-1, (n, H, d)).flatten(1, 2)
        beta = self.beta_max * torch.sigmoid(self.b_proj(u))  # [B, T, n H]
        if self.beta_max > 1:  # the part above 1 (the reflection's) through its site; the sum is β exactly
            beta = beta.clamp(max=1) + self.reflection(F.relu(beta - 1))
        beta = beta.unflatten(-1, (n, H)).flatten(1, 2)[..., None]
        reads = torch.cat([q.new_zeros(*q.shape[:2], n - 1, H, d), q[:, :, None]], dim=2)  # q at the last step only
        log_w = u.new_zeros(u.shape[0], u.shape[1], n, H, 1)
        if self.a_proj is not None:
            g = -torch.exp(self.A_log) * F.softplus(self.a_proj(u) + self.dt_bias)  # log α  [B, T, H]
            log_w = torch.cat([g[:, :, None, :, None], log_w[:, :, 1:]], dim=2)  # at each token's first step
        log_w = log_w.flatten(1, 2)  # the transition α (I - β k k^T) = diag(α) + (-α β k) k^T
        return DPLRInputs(reads.flatten(1, 2), beta * k, v, log_w, k, -beta * log_w.exp() * k)

    def _out(self, o, steps, u, shift):
        return self.out(o, u)


SPEC = MixerSpec(cls=DeltaProduct, options=DeltaProductOptions, default_conv=4, default_mlp=True, default_norm="rmsnorm")
