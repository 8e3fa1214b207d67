"""H3 (Fu, Dao et al., 2023, "Hungry Hungry Hippos"), as in zoology's `H3` used by the study.

With H = D / d_h heads of head dim d_h, per head h:
    q, k, v = W_q u, W_k u, W_v u                       [B, T, D] each, viewed [B, T, H, d_h]
    k̄ = conv(k)                                         the shift SSM on the keys (site `conv_out`, [B, T, D])
    kv_t = k̄_t v_t^T                                    [B, T, H, d_h, d_h]
    s = SSM_diag,h(kv) + D_h kv                         a diagonal SSM per head on every entry of kv
                                                        (site `core_out`, flattened: [B, T, D · d_h]);
                                                        its state x_t after t: site `state` (`H3State`)
    o_t[h] = s_t[h]^T q_t[h]                             [B, T, H, d_h]   (the multiplicative gate by q)
    y = W_o o                                           [B, T, D]
SSM_diag is S4D-Lin with M = d_state / 2 complex modes (a real state of d_state), bilinear discretisation:
    A_m = -exp(a_m) + i θ_m,  dA = (1 + ΔA/2) / (1 - ΔA/2),  dB = Δ B / (1 - ΔA/2)
    x_t = dA ⊙ x_{t-1} + dB kv_t,   SSM(kv)_t = 2 Re(C · x_t)      x: [B, H, d_h, d_h, M] complex
init: a = log 1/2, θ_m = π m, B = 1, C ~ CN(0, 1), Δ ~ logU[dt_min, dt_max] per head, D_h ~ N(0, 1).
Training convolves kv with the SSM's kernel (`ops.dispatch.diag_ssm_bilinear`: on CPU one fused kernel
from the parameters, a direct conv; else by FFT; same math); the recurrent view steps x.

The shift SSM is our shared short conv. A shift SSM of state size N (A the shift matrix, B = e_1) keeps
the last N keys, so k̄_t = Σ_{j<N} C_j k_{t-j} + D k_t: exactly a causal depthwise conv of kernel N,
its D being the lag-0 tap (folded in; zoology's separate D ~ N(0, 1) is the one init difference).
So `d_conv = k` is a shift SSM of state k, 0 removes it (k̄ = k), and "long" puts the implicit long
conv in its place, as for every mixer.

Published (paper_setup.md, "state 1024, head dim 2"): the study's code passes zoology's H3
`d_state = l_max = n_positions = 1024` (its comment: "makes it mathematically equivalent to Hyena") and
`head_dim = 2`. Our reading: d_state = 1024 sizes both SSMs, so the shift SSM is a conv of kernel 1024
(longer than every sequence: an explicit filter over the whole context; `default_conv = 1024`), and
the diagonal SSM has 512 complex modes per head. Difference: no biases (zoology's H3 projections have
them; the study asks for none).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import torch
from pydantic import Field, field_validator
from torch import nn

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec
from mecheval.models.ops.diag_ssm import (
    bilinear,
    diag_ssm_first_order,
    diag_ssm_init_state,
    diag_ssm_state_at,
    diag_ssm_state_response,
    diag_ssm_states,
    diag_ssm_states_response,
    diag_ssm_step,
)
from mecheval.models.ops.dispatch import diag_ssm_bilinear, small_matmul
from mecheval.models.shortconv import ConvSpec, make_conv
from mecheval.models.sites import Site
from mecheval.models.states import StateSite, StateValue

PUBLISHED_STATE = 1024  # zoology's d_state as the study sets it (= n_positions)


class H3Options(MixerOptions):
    d_state: int = Field(PUBLISHED_STATE, gt=0, description="real state size of the diagonal SSM (even)")
    head_dim: int = Field(2, gt=0)
    dt_min: float = Field(0.001, gt=0)
    dt_max: float = Field(0.1, gt=0)

    @field_validator("d_state")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError(f"d_state must be even (M = d_state / 2 complex modes), got {v}")
        return v


@dataclasses.dataclass(frozen=True)
class H3State(StateValue):
    """The diagonal SSM's state x_t [H, d_h, d_h, M] complex after each t (as 2 · H d_h² M reals), from
    its input kv (`ops.diag_ssm`'s closed forms); output: s = SSM(kv) + D kv [B, T, H, d_h, d_h]."""

    kv: torch.Tensor  # [B, T, H, d_h, d_h]
    discretize: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # -> dA, dB, C [H, M] complex

    @functools.cached_property
    def _modes(self):  # discretised only if the site is read (training computes the kernel without it)
        return self.discretize()

    dA = property(lambda self: self._modes[0])
    dB = property(lambda self: self._modes[1])
    C = property(lambda self: self._modes[2])

    @property
    def size(self) -> int:
        return 2 * self.kv[0, 0].numel() * self.dA.shape[1]

    @property
    def work(self) -> int:
        return 4 * self.size  # the complex state and its einsum operands

    def _at(self, rows, pos):
        return torch.view_as_real(diag_ssm_state_at(self.kv[rows], self.dA, self.dB, pos)).flatten(1)

    def _change(self, rows, pos, delta):
        dx = torch.view_as_complex(delta.view(len(rows), *self.kv.shape[2:], self.dA.shape[1], 2).contiguous())
        return diag_ssm_state_response(self.dA, self.C, self.kv.shape[1], pos, dx)

    def _every(self, rows):
        return torch.view_as_real(diag_ssm_states(self.kv[rows], self.dA, self.dB)).flatten(2)

    def _change_every(self, rows, delta):
        dx = delta.view(len(rows), delta.shape[1], *self.kv.shape[2:], self.dA.shape[1], 2)
        return diag_ssm_states_response(self.dA, self.C, torch.view_as_complex(dx.contiguous()))

    @property
    def work_first_order(self) -> int:
        return 2 * self.kv.shape[2] * self.steps**2  # the [H, T, T] pair products

    def _first_order(self, source, rows, grads):
        """The closed form of `ops.diag_ssm` (time-invariant: from kv' − kv and the kernel, no state)."""
        du = source.kv[rows] - self.kv[rows]
        return diag_ssm_first_order(du, [g.to(du.dtype) for g in grads], self.dA, self.dB, self.C)


class H3(Mixer):
    def __init__(self, d_model: int, conv: ConvSpec, options: H3Options, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        if d_model % options.head_dim:
            raise ValueError(f"d_model={d_model} is not divisible by h3 head_dim={options.head_dim}")
        if options.dt_min > options.dt_max:
            raise ValueError(f"h3 dt_min={options.dt_min} > dt_max={options.dt_max}")
        self.d_head = hd = options.head_dim
        self.n_heads = H = d_model // hd
        self.n_modes = M = options.d_state // 2
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.conv = make_conv(conv, d_model, max_len)
        if self.conv is not None:
            self.conv_out = Site()
        lo, hi = math.log(options.dt_min), math.log(options.dt_max)
        self.log_dt = nn.Parameter(torch.rand(H) * (hi - lo) + lo)  # [H]
        self.log_A_real = nn.Parameter(torch.full((H, M), math.log(0.5)))  # [H, M]
        self.A_imag = nn.Parameter(math.pi * torch.arange(M, dtype=torch.float32).repeat(H, 1))  # [H, M]
        self.B = nn.Parameter(torch.view_as_real(torch.ones(H, M, dtype=torch.complex64)).clone())  # [H, M, 2]
        self.C = nn.Parameter(torch.view_as_real(torch.randn(H, M, dtype=torch.complex64)).clone())  # [H, M, 2]
        self.D = nn.Parameter(torch.randn(H))
        self.state = StateSite()
        self.core_out = Site()
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def _ssm_params(self):
        """log_dt [H], log_A_real, A_imag [H, M], B, C [H, M, 2]: S4D-Lin's, as `ops.diag_ssm.bilinear` takes them."""
        return self.log_dt, self.log_A_real, self.A_imag, self.B, self.C

    def _discretize(self):
        """Bilinear discretisation -> dA, dB, C: [H, M] complex."""
        return bilinear(*self._ssm_params())

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # [..., D] -> [..., H, d_h]
        return x.unflatten(-1, (self.n_heads, self.d_head))

    def _kv(self, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """kv[h] = k[h] v[h]^T: k, v [..., D] -> [..., H, d_h, d_h] (`small_matmul`: tiny broadcasts and gemm
        calls per head are slow on CPU)."""
        return small_matmul(self._heads(k).unsqueeze(-1), self._heads(v).unsqueeze(-2))

    def _out(self, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """o[h] = s[h]^T q[h], then W_o: q [..., D], s [..., H, d_h, d_h] -> [..., D]."""
        return self.out_proj(small_matmul(self._heads(q).unsqueeze(-2), s).flatten(-3))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(u).chunk(3, dim=-1)
        if self.conv is not None:
            k = self.conv_out(self.conv(k))
        kv = self._kv(k, v)  # [B, T, H, d_h, d_h]
        s = diag_ssm_bilinear(kv, *self._ssm_params(), D=self.D)  # SSM(kv) + D kv (D as the kernel's lag-0 tap)
        s = self.state(H3State(s, kv, self._discretize)).output
        s = self.core_out(s.flatten(-3)).unflatten(-1, kv.shape[-3:])
        return self._out(q, s)

    def init_state(self, batch_size: int, device=None, dtype=None):
        """(conv state or None, x [B, H, d_h, d_h, M] complex zeros)."""
        conv = None if self.conv is None else self.conv.init_state(batch_size, device=device, dtype=dtype)
        shape = (batch_size, self.n_heads, self.d_head, self.d_head)
        return conv, diag_ssm_init_state(shape, self.n_modes, dtype or torch.get_default_dtype(), device)

    def step(self, u_t: torch.Tensor, state):
        conv_state, x = state
        q, k, v = self.qkv(u_t).chunk(3, dim=-1)
        if self.conv is not None:
            k, conv_state = self.conv.step(k, conv_state)
        kv = self._kv(k, v)  # [B, H, d_h, d_h]
        y, x = diag_ssm_step(kv, *self._discretize(), x)
        return self._out(q, y + self.D[:, None, None] * kv), (conv_state, x)


SPEC = MixerSpec(cls=H3, options=H3Options, default_conv=PUBLISHED_STATE, default_mlp=True, default_norm="layernorm")
