"""RWKV-7 "Goose" (Peng et al., 2025, "RWKV-7 'Goose' with Expressive Dynamic State Evolution"): its time
mixing, as flash-linear-attention's `RWKV7Attention` layer.

With H heads of d_h = D / H (`mixers.dplr`'s frame); for □ in r, w, k, v, a, g:
    x^□_t = u_t + δ_t ⊙ μ_□,  δ_t = u_{t-1} - u_t   the token shift (μ_□ [D] learned; site `two_token`: δ,
                                                   zeroing it ablates the shift; `token_shift: false` trains
                                                   with x^□ = u)
    r, k, v = W_r x^r, W_k x^k, W_v x^v            [B, T, D] each
    c = conv([r; k; v])                            the shared short-conv slot on the 3D channels (site
                                                   `conv_out`); d_conv 0 (the default) removes it
    w_t = exp(-e^{-1/2} σ(W_w2 tanh(W_w1 x^w_t) + b_w))   [B, T, H, d_h]: the vector-valued decay, in (0.54, 1)
    a_t = σ(W_a2 W_a1 x^a_t + b_a)                 the in-context learning rate
    g_t = W_g2 σ(W_g1 x^g_t)                        the output gate
    κ̂_t = normalise_{d_h}(k_t ⊙ ξ)                  the removal key;   k̃_t = k_t ⊙ (1 + (a_t - 1) ⊙ α)  the replacement key
The generalised delta rule (their eq. with S: [d_v, d_k]), per head:
    S_t = S_{t-1} (diag(w_t) - κ̂_t^T (a_t ⊙ κ̂_t)) + v_t^T k̃_t,     o_t = S_t r_t^T
here with S = their S^T: [B, H, d_k, d_v], `ops.dplr` with w_t, a = -κ̂_t, b = a_t ⊙ κ̂_t, k = k̃_t, q = r_t
    S_t = (diag(w_t) - (a_t ⊙ κ̂_t) κ̂_t^T) S_{t-1} + k̃_t v_t^T,     o_t = S_t^T r_t
                                                   (site `state`: S after t; `core_out`: o, heads concatenated)
    p_t = GroupNorm_H(o_t) + ((r_t ⊙ ρ ⊙ k̃_t) · 1) v_t   per head (the "bonus": the current token directly)
    y = W_o (p ⊙ g)                                 [B, T, D]
The token shift is RWKV's own two-token mixing: x^□_t = (1 - μ_□) ⊙ u_t + μ_□ ⊙ u_{t-1} is a causal depthwise
conv of kernel 2 on the input, its taps tied to sum to 1, before each projection. The shared slot is the
unconstrained conv of `d_conv` taps after the projections (where DeltaNet and fla's GLA put theirs); the two
compose, and `token_shift: false` with `d_conv: 2` swaps one for the other.
Defaults as fla's layer at d = 64: 1 head (its head_dim 64), low ranks 32; init as the RWKV-7 reference's
layer 0 (μ, ξ, α, ρ, b_w, b_a). Intended differences: no value residual (v mixed with layer 0's v needs
another layer's activations, outside the mixer contract); projections keep PyTorch's default init.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field
from torch import nn

from mecheval.models.mixers.base import MixerOptions, MixerSpec
from mecheval.models.mixers.dplr import DPLRMixer
from mecheval.models.ops.dispatch import l2_normalize
from mecheval.models.ops.dplr import DPLRInputs
from mecheval.models.shortconv import ConvSpec

SHIFTED = ("r", "w", "k", "v", "a", "g")  # the token-shifted inputs, in the order of μ's rows
MAX_LOG_DECAY = math.exp(-0.5)  # -log w_t < e^{-1/2}


class RWKV7Options(MixerOptions):
    n_heads: int = Field(1, gt=0)
    decay_rank: int = Field(32, gt=0, description="rank of the decay's low-rank MLP")
    a_rank: int = Field(32, gt=0, description="rank of the in-context learning rate's projection")
    gate_rank: int = Field(32, gt=0, description="rank of the output gate's low-rank MLP")
    token_shift: bool = Field(True, description="RWKV's two-token mixing before the projections",
                              json_schema_extra={"ablation": "no token shift"})
    norm_eps: float = Field(1e-5, gt=0, description="the GroupNorm's eps, per channel of a head")


def low_rank(d_model: int, rank: int, act: nn.Module, bias: bool) -> nn.Sequential:
    """W_2 act(W_1 x) (+ b): RWKV's low-rank MLP ("LoRA"), D -> rank -> D."""
    return nn.Sequential(nn.Linear(d_model, rank, bias=False), act, nn.Linear(rank, d_model, bias=bias))


class RWKV7(DPLRMixer):
    def __init__(self, d_model: int, conv: ConvSpec, options: RWKV7Options, layer_idx: int, max_len: int):
        H = options.n_heads
        super().__init__(d_model, conv, options, layer_idx, max_len, channels=3 * d_model,
                         heads=(H, d_model // H, d_model // H), shifts=options.token_shift)
        self.mu = nn.Parameter(torch.zeros(len(SHIFTED), d_model)) if options.token_shift else None
        self.r_proj, self.k_proj, self.v_proj = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))
        self.decay = low_rank(d_model, options.decay_rank, nn.Tanh(), bias=True)
        self.icl_rate = low_rank(d_model, options.a_rank, nn.Identity(), bias=True)
        self.gate = low_rank(d_model, options.gate_rank, nn.Sigmoid(), bias=False)
        self.removal = nn.Parameter(torch.zeros(d_model))  # ξ
        self.replacement = nn.Parameter(torch.zeros(d_model))  # α
        self.bonus = nn.Parameter(torch.zeros(H, self.d_k))  # ρ
        self.g_norm = nn.GroupNorm(H, d_model, eps=self.d_k * options.norm_eps)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
        self._init_as_reference()

    @torch.no_grad()
    def _init_as_reference(self) -> None:
        """The RWKV-7 reference init of layer 0 (fla's `_initialize_weights` at layer_idx 0)."""
        D, d_h = self.d_model, self.d_k
        n = torch.arange(D, dtype=torch.float32)
        ramp = n / max(D - 1, 1) - 0.5
        zigzag = (n % d_h - (d_h - 1) / 2) / max((d_h - 1) / 2, 1)
        zigzag = zigzag * zigzag.abs()
        if self.mu is not None:
            powers = torch.tensor([0.2, 0.9, 0.7, 0.7, 0.9, 0.2])[:, None]  # r, w, k, v, a, g
            self.mu.copy_(1 - (n / D) ** powers)
        self.removal.fill_(0.71).sub_(0.1 * ramp)
        self.replacement.fill_(1.02)
        self.bonus.fill_(-0.04)
        self.decay[-1].bias.copy_(-6 + 6 * (n / max(D - 1, 1)) + 0.5 + 2.5 * zigzag)
        self.icl_rate[-1].bias.copy_(-0.19 + 0.3 * zigzag + 0.4 * ramp)

    def _shifted(self, name: str, u, shift):
        """x^□ = u + δ ⊙ μ_□ for □ = name (u itself without the token shift): [B, T, D]."""
        return u if self.mu is None else u + shift * self.mu[SHIFTED.index(name)]

    def _project(self, u, shift):
        projections = zip("rkv", (self.r_proj, self.k_proj, self.v_proj))
        return torch.cat([proj(self._shifted(name, u, shift)) for name, proj in projections], dim=-1)

    def _recurrence(self, c, u, shift):
        heads = (self.n_heads, self.d_k)
        r, k, v = (z.unflatten(-1, heads) for z in c.chunk(3, dim=-1))
        log_w = (-MAX_LOG_DECAY * torch.sigmoid(self.decay(self._shifted("w", u, shift)))).unflatten(-1, heads)
        a = torch.sigmoid(self.icl_rate(self._shifted("a", u, shift))).unflatten(-1, heads)
        kappa = l2_normalize(k * self.removal.view(heads))  # κ̂
        k_new = k * (1 + (a - 1) * self.replacement.view(heads))  # k̃
        return DPLRInputs(r, k_new, v, log_w, -kappa, a * kappa)

    def _out(self, o, steps, u, shift):
        r, k_new, v = steps.q, steps.k, steps.v
        normed = self.g_norm(o.flatten(-2).flatten(0, -2)).view(o.shape)
        p = normed + (r * self.bonus * k_new).sum(-1, keepdim=True) * v
        return self.o_proj(p.flatten(-2) * self.gate(self._shifted("g", u, shift)))


SPEC = MixerSpec(cls=RWKV7, options=RWKV7Options, default_conv=0, default_mlp=True, default_norm="rmsnorm")
