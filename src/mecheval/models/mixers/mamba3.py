"""Mamba-3, SISO (Lahoti et al., 2026, "Mamba-3: Improved Sequence Modeling using State Space Principles"):
Mamba-2's SSD with a trapezoidal discretisation, data-dependent rotary B and C, B/C norms and biases, and
no short convolution.

With D_i = expand · D inner channels in H = D_i / P heads of P channels, N = d_state (even):
    z, x, B, C, dt, θ, l = W_in u       [B, T, D_i], [B, T, D_i], [B, T, N] x2, [B, T, H], [B, T, H, N/2], [B, T, H]
    Δ_t = softplus(dt_t + b_Δ),  λ_t = sigmoid(l_t),  A_h = -exp(A_log_h)                     [B, T, H]
    B_t <- R(φ_t) (RMSNorm(B_t) + b_B),  C_t <- R(φ_t) (RMSNorm(C_t) + b_C)                 [B, T, H, N]
        b_B, b_C [H, N] (init 1); R(φ) rotates the pairs (n, n + N/2) by the angles φ [N/2] (rotary on
        the state dimension), φ_t = Σ_{s<=t} Δ_s θ_s the cumulative data-dependent angle (a complex-valued
        SSM written as real rotations; site `rotary`: the steps Δ_t θ_t [B, T, H · N/2], zeroing them
        ablates the rotation, `interventions.terms`)
The trapezoidal update (the exponential-trapezoidal discretisation), per head h:
    α_t = exp(Δ_t A_h),  γ_t = λ_t Δ_t,  β_t = (1 − λ_t) Δ_t exp(Δ_t A_h)
    h_t = α_t h_{t-1} + γ_t x_t B_t^T + β_t x_{t-1} B_{t-1}^T        h: [B, H, P, N]  (x_{-1} = 0; site
                                                                     `state`, `mamba2.SSDState`)
    y_t = h_t C_t + D_h x_t                                         (site `core_out`, [B, T, D_i])
    out = W_out RMSNorm(y ⊙ SiLU(z))                                [B, T, D]   (the gated norm)
The two-token term β_t x_{t-1} B_{t-1}^T writes the previous token into the state again, with the current
token's gates: the site `two_token` carries β_t x_{t-1} ([B, T, D_i]); zeroing it ablates the term (the
question whether it plays the short conv's role; `interventions.terms`). forward runs `ops.ssd.ssd`
with a rank-2 input (the current and the previous token); the recurrent view steps h, the previous token's
x and B, and φ.
d_conv 0 by default; d_conv k puts the shared conv on [x; B; C] before the norms (no activation), as an
ablation. Init: A_h ~ U[1, 16], softplus(b_Δ) ~ logU[dt_min, dt_max], D = 1, b_B = b_C = 1.
Reference: state-spaces/mamba's `Mamba3Simple._recurrence` (tests/models/test_mamba3.py writes its equations).
Intended differences from `Mamba3Simple`: the angle increment is Δ_t θ_t, the paper's discretisation of the
rotation (Mamba3Simple adds θ_t itself; its full `Mamba3` adds Δ_t π tanh θ_t, with half the state rotated);
A_h is a parameter per head (the full `Mamba3` also makes it data-dependent); one group; no MIMO.
Block as Mamba's and Mamba-2's here: no MLP, RMSNorm.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mecheval.models.mixers.base import MixerSpec
from mecheval.models.mixers.mamba2 import Mamba2, Mamba2Options, SSDState
from mecheval.models.ops.ssd import ssd, ssd_step
from mecheval.models.sites import Site


class Mamba3Options(Mamba2Options):
    """Mamba-2's options; d_state N must be even (the rotary pairs). Two training ablations, which ask what lets
    Mamba-3 learn without a conv (as Mamba needs its conv): two_token False trains without the trapezoidal
    update's previous-token term (β_t = 0: the exponential-Euler update with γ_t = λ_t Δ_t); rotary False
    without the data-dependent rotation of B and C (φ_t = 0)."""

    two_token: bool = Field(True, description="keep the previous-token term β_t x_{t-1} B_{t-1}^T (False: ablated in training)",
                            json_schema_extra={"ablation": "no two-token"})
    rotary: bool = Field(True, description="rotate B and C by the data-dependent angle φ_t (False: φ_t = 0, ablated in training)",
                         json_schema_extra={"ablation": "no rotary"})

    def check(self, d_model: int) -> None:
        super().check(d_model)
        if self.d_state % 2:
            raise ValueError(f"d_state={self.d_state} must be even (rotary pairs)")


def rotate(v: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """R(φ) v: the pairs (v_n, v_{n+N/2}) rotated by φ_n. v [..., N]; φ [..., N/2] -> [..., N]."""
    v1, v2 = v.chunk(2, dim=-1)
    cos, sin = phi.cos(), phi.sin()
    return torch.cat([v1 * cos - v2 * sin, v1 * sin + v2 * cos], dim=-1)


class Mamba3(Mamba2):
    """Mamba-2's layer with the trapezoidal update, rotary and normed B/C with biases, no conv by default."""

    label = "mamba3"
    Options = Mamba3Options
    default_conv = 0

    def __init__(self, d_model: int, conv, options: Mamba3Options, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.keeps_two_token = options.two_token  # read by _gates (forward and step)
        self.keeps_rotary = options.rotary  # read by _angle_steps (forward and step)

    def _projections(self) -> list[int]:
        """z, [x; B; C], dt, and Mamba-3's θ (N/2 angles per head) and l (λ's logit per head)."""
        return super()._projections() + [self.H * self.N // 2, self.H]

    def _add_before_state(self) -> None:
        self.B_norm, self.C_norm = nn.RMSNorm(self.N, eps=1e-5), nn.RMSNorm(self.N, eps=1e-5)
        self.B_bias, self.C_bias = nn.Parameter(torch.ones(self.H, self.N)), nn.Parameter(torch.ones(self.H, self.N))
        self.rotary = Site()  # the sites in the order forward visits them
        self.two_token = Site()

    def _split(self, u: torch.Tensor):
        """u [..., D] -> z [..., D_i], [x; B; C] [..., D_i + 2N], dt [..., H], θ [..., H, N/2], l [..., H]."""
        z, xbc, dt, theta, lam = self.in_proj(u).split(self.sizes, dim=-1)
        return z, xbc, dt, theta.unflatten(-1, (self.H, self.N // 2)), lam

    def _gates(self, xbc: torch.Tensor, dt: torch.Tensor, lam: torch.Tensor):
        """-> x [..., H, P], B, C before rotation [..., H, N], Δ, α, γ, β [..., H] (module docstring)."""
        x, Bm, Cm = xbc.split([self.d_inner, self.N, self.N], dim=-1)
        delta = F.softplus(dt + self.dt_bias)
        log_alpha = delta * -torch.exp(self.A_log)
        lam = torch.sigmoid(lam)
        Bm = self.B_norm(Bm).unsqueeze(-2) + self.B_bias
        Cm = self.C_norm(Cm).unsqueeze(-2) + self.C_bias
        gamma, beta = lam * delta, (1 - lam) * delta * log_alpha.exp() * self.keeps_two_token
        return x.unflatten(-1, (self.H, self.P)), Bm, Cm, delta, log_alpha, gamma, beta

    def _angle_steps(self, delta: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        """Δ_t θ_t, the rotary angle's increment [..., H, N/2] (zero where trained without the rotation)."""
        return delta[..., None] * theta * self.keeps_rotary

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        z, xbc, dt, theta, lam = self._split(u)
        if self.conv is not None:
            xbc = self.conv_out(self.conv(xbc))
        x, Bm, Cm, delta, log_alpha, gamma, beta = self._gates(xbc, dt, lam)
        steps = self.rotary(self._angle_steps(delta, theta).flatten(-2)).unflatten(-1, theta.shape[-2:])
        phi = steps.cumsum(1)  # [B, T, H, N/2]
        Bm, Cm = rotate(Bm, phi), rotate(Cm, phi)
        earlier = lambda v: F.pad(v, (0, 0) * (v.dim() - 2) + (1, 0))[:, :-1]  # v_{t-1}, 0 at t = 0
        prev = self.two_token((beta[..., None] * earlier(x)).flatten(-2)).unflatten(-1, (self.H, self.P))
        xs = torch.stack([gamma[..., None] * x, prev], dim=-1)  # the rank-2 input [B, T, H, P, 2]
        Bs = torch.stack([Bm, earlier(Bm)], dim=-1)  # [B, T, H, N, 2]
        y = self.state(SSDState(ssd(xs, Bs, Cm, log_alpha), xs, Bs, Cm, log_alpha)).output
        return self._out(self.core_out(self._core(y, x)), z)

    def init_state(self, batch_size: int, device=None, dtype=None):
        """(conv state or None, h [B, H, P, N], x_{t-1} [B, H, P], B_{t-1} [B, H, N], φ_{t-1} [B, H, N/2]), zeros."""
        conv = None if self.conv is None else self.conv.init_state(batch_size, device=device, dtype=dtype)
        zeros = lambda *shape: torch.zeros(batch_size, self.H, *shape, device=device, dtype=dtype)
        return conv, zeros(self.P, self.N), zeros(self.P), zeros(self.N), zeros(self.N // 2)

    def step(self, u_t: torch.Tensor, state):
        conv_state, h, x_prev, B_prev, phi = state
        z, xbc, dt, theta, lam = self._split(u_t)
        if self.conv is not None:
            xbc, conv_state = self.conv.step(xbc, conv_state)
        x, B_t, C_t, delta, log_alpha, gamma, beta = self._gates(xbc, dt, lam)
        phi = phi + self._angle_steps(delta, theta)
        B_t, C_t = rotate(B_t, phi), rotate(C_t, phi)
        xs = torch.stack([gamma[..., None] * x, beta[..., None] * x_prev], dim=-1)
        y, h = ssd_step(xs, torch.stack([B_t, B_prev], dim=-1), C_t, log_alpha, h)
        return self._out(self._core(y, x), z), (conv_state, h, x, B_t, phi)


SPEC = MixerSpec.of(Mamba3, "mamba3")
