"""GLA, gated linear attention (Yang et al., 2024, "Gated Linear Attention Transformers with Hardware-Efficient
Training"), as flash-linear-attention's `GatedLinearAttention` layer.

With H heads, d_k = expand_k · D / H, d_v = expand_v · D / H (`mixers.dplr`'s frame):
    q, k, v = W_q u, W_k u, W_v u                  [B, T, H d_k], [B, T, H d_k], [B, T, H d_v]
    c = conv([q; k; v])                            the shared short-conv slot on the 2 H d_k + H d_v channels
                                                   (site `conv_out`); d_conv 0 (the default) removes it
    α_t = sigmoid(W_α2 W_α1 u_t + b_α)^{1/τ}        [B, T, H, d_k]: one forget gate per key dimension, from a
                                                   low-rank (r = gate_rank) projection; τ = 16 (eq. "α_t" of
                                                   sec. 4.4, fla's gate_logit_normalizer)
    S_t = diag(α_t) S_{t-1} + k_t v_t^T            S: [B, H, d_k, d_v]   (sec. 4.1: S_t = G_t ⊙ S_{t-1} + k_t^T v_t
                                                   with G_t = α_t^T 1, their row vectors)
    o_t = S_t^T q_t / √d_k                          (site `state`: S after t; `core_out`: o, heads concatenated)
    y = W_o (RMSNorm_{d_v}(o) ⊙ SiLU(W_g u))        [B, T, D]   (the gated output norm)
The recurrence is `ops.dplr` with w_t = α_t and no low-rank term. Defaults as fla's layer: 4 heads,
expand_k 0.5, expand_v 1, gate rank 16, τ = 16, no short conv (`use_short_conv=False`, as the paper), no
feature map, no bias but the gate's. Intended difference: fla's `use_short_conv` adds a SiLU after its
convs; here d_conv adds the conv alone, so that d_conv 0 and 4 differ by the convolution only.
"""

from __future__ import annotations

import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mecheval.models.mixers.base import MixerOptions, MixerSpec
from mecheval.models.mixers.dplr import DPLRMixer, GatedOutput
from mecheval.models.ops.dplr import DPLRInputs
from mecheval.models.shortconv import ConvSpec


class GLAOptions(MixerOptions):
    n_heads: int = Field(4, gt=0)
    expand_k: float = Field(0.5, gt=0, description="key width H d_k = expand_k · d_model")
    expand_v: float = Field(1.0, gt=0, description="value width H d_v = expand_v · d_model")
    gate_rank: int = Field(16, gt=0, description="rank of the forget gate's projection")
    gate_normalizer: float = Field(16.0, gt=0, description="τ: log α = logsigmoid(·) / τ")
    norm_eps: float = Field(1e-5, gt=0)

    def widths(self, d_model: int) -> tuple[int, int]:
        """(H d_k, H d_v)."""
        return int(d_model * self.expand_k), int(d_model * self.expand_v)

    def check(self, d_model: int) -> None:  # heads split the key and value widths, not d_model
        for name, width in zip(("expand_k", "expand_v"), self.widths(d_model)):
            if width < self.n_heads or width % self.n_heads:
                raise ValueError(f"gla: {name} · d_model = {width} is not a positive multiple of n_heads={self.n_heads}")


class GLA(DPLRMixer):
    def __init__(self, d_model: int, conv: ConvSpec, options: GLAOptions, layer_idx: int, max_len: int):
        dk, dv = options.widths(d_model)
        H = options.n_heads
        super().__init__(d_model, conv, options, layer_idx, max_len, channels=2 * dk + dv, heads=(H, dk // H, dv // H))
        self.qkv = nn.Linear(d_model, 2 * dk + dv, bias=False)
        self.gate = nn.Sequential(nn.Linear(d_model, options.gate_rank, bias=False), nn.Linear(options.gate_rank, dk))
        self.tau = options.gate_normalizer
        self.out = GatedOutput(d_model, H, dv // H, options.norm_eps)

    def _project(self, u, shift):
        return self.qkv(u)

    def _recurrence(self, c, u, shift):
        heads = (self.n_heads, self.d_k)
        q, k, v = c.split([self.n_heads * self.d_k] * 2 + [self.n_heads * self.d_v], dim=-1)
        log_alpha = F.logsigmoid(self.gate(u)) / self.tau
        return DPLRInputs(q.unflatten(-1, heads) * self.d_k**-0.5, k.unflatten(-1, heads),
                          v.unflatten(-1, (self.n_heads, self.d_v)), log_alpha.unflatten(-1, heads), None, None)

    def _out(self, o, steps, u, shift):
        return self.out(o, u)


SPEC = MixerSpec(cls=GLA, options=GLAOptions, default_conv=0, default_mlp=True, default_norm="rmsnorm")
