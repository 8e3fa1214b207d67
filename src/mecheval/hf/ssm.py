"""The owned path of a `transformers` selective-SSM mixer: mecheval's scan run on the mixer's own parameters.

`transformers` keeps a Mamba mixer's SSM state as a local of its forward (only the last state reaches
the cache), so the state cannot be hooked there. `owned_path(mixer)` returns a module that computes the
same output from the *same* Parameter objects (no copy: training or zeroing a conv tap changes both)
with mecheval's scan, and carries the sites `conv_in`, `conv_out`, `state` (a `MambaState`, patchable at
any position) and `core_out`. The family is recognised by the mixer's parameters, not its class:
    A_log [Di, N], D, in_proj, conv1d, x_proj, dt_proj, out_proj      Mamba   -> mecheval's own `Mamba`
    A_log [H], D [H], dt_bias [H], in_proj, conv1d, norm, out_proj     Mamba-2 -> `Mamba2Path`
Mamba-2's scalar-per-head A and shared B, C (n_groups 1) are Mamba's scan with A, Δ and D repeated over
each head's P channels: one scan, one state readout for both.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mecheval.errors import MechevalError
from mecheval.models.mixers.mamba import Mamba, MambaOptions, MambaState
from mecheval.models.ops.dispatch import selective_scan
from mecheval.models.shortconv import ShortConv
from mecheval.models.sites import Site
from mecheval.models.states import StateSite


class UnsupportedModel(MechevalError, ValueError):
    """A `transformers` model `mecheval.hf.wrap` cannot map; the message names what is missing."""


MAMBA = ("A_log", "D", "in_proj", "conv1d", "x_proj", "dt_proj", "out_proj")
MAMBA2 = ("A_log", "D", "dt_bias", "in_proj", "conv1d", "norm", "out_proj")


def _has(module: nn.Module, names: tuple[str, ...]) -> bool:
    return all(hasattr(module, n) for n in names)


def is_ssm(mixer: nn.Module) -> bool:
    """The mixer holds a selective SSM (an `A_log` parameter)."""
    return isinstance(getattr(mixer, "A_log", None), nn.Parameter)


def _short_conv(conv1d: nn.Conv1d, what: str) -> ShortConv:
    """A mecheval ShortConv sharing a depthwise causal `nn.Conv1d`'s weight [C, 1, k]."""
    C = conv1d.in_channels
    if conv1d.groups != C or conv1d.out_channels != C or conv1d.padding[0] != conv1d.kernel_size[0] - 1:
        raise UnsupportedModel(f"{what}: conv1d is not a depthwise causal conv (groups={conv1d.groups}, channels={C})")
    conv = ShortConv(C, conv1d.kernel_size[0])
    conv.weight = conv1d.weight
    return conv


def _check_silu(mixer: nn.Module, what: str) -> None:
    act = getattr(mixer, "activation", "silu")
    if act not in ("silu", "swish"):
        raise UnsupportedModel(f"{what}: activation {act!r}; the owned path has SiLU")


def owned_path(mixer: nn.Module, layer: int, what: str) -> nn.Module:
    """The owned path of an SSM mixer (module docstring); UnsupportedModel naming what is missing."""
    _check_silu(mixer, what)
    if _has(mixer, MAMBA):
        return _mamba(mixer, layer, what)
    if _has(mixer, MAMBA2):
        return Mamba2Path(mixer, what)
    missing = sorted({n for n in MAMBA + MAMBA2 if not hasattr(mixer, n)})
    raise UnsupportedModel(
        f"{what}: a recurrent mixer (it has A_log) of neither known layout; Mamba needs {list(MAMBA)}, "
        f"Mamba-2 {list(MAMBA2)}; missing: {missing}"
    )


def _mamba(m: nn.Module, layer: int, what: str) -> Mamba:
    """mecheval's `Mamba` whose parameters are the transformers mixer's (shared, not copied)."""
    Di, N = m.A_log.shape
    D = m.in_proj.in_features
    if Di % D or m.in_proj.out_features != 2 * Di:
        raise UnsupportedModel(f"{what}: in_proj {D} -> {m.in_proj.out_features} is not D -> 2 · expand · D")
    opts = MambaOptions(d_state=N, expand=Di // D, dt_rank=m.dt_proj.in_features, conv_bias=m.conv1d.bias is not None)
    ours = Mamba(D, m.conv1d.kernel_size[0], opts, layer, max_len=1)
    ours.conv = _short_conv(m.conv1d, what)
    ours.conv_bias = m.conv1d.bias
    for name in ("in_proj", "x_proj", "dt_proj", "out_proj", "A_log", "D"):
        setattr(ours, name, getattr(m, name))
    return ours


class Mamba2Path(nn.Module):
    """A transformers Mamba-2 mixer on mecheval's scan (n_groups 1), with H heads of P channels, Di = H · P:
        z, xBC, dt = W_in u                     [B, T, Di], [B, T, Di + 2N], [B, T, H]
        c = conv(xBC) + b_c                     site `conv_out`
        x, B, C = split(SiLU(c))
        Δ = clamp(softplus(dt + b_dt), limit)   [B, T, H], repeated over each head's P channels
        h_t = exp(Δ_t A_h) h_{t-1} + (Δ_t x_t) B_t,  core_t = C_t · h_t + D_h x_t     sites `state`, `core_out`
        y = W_out gated_rmsnorm(core, z)
    """

    def __init__(self, m: nn.Module, what: str) -> None:
        super().__init__()
        H, P = m.num_heads, m.head_dim
        self.Di, self.N, self.H, self.P = H * P, m.ssm_state_size, H, P
        if m.n_groups != 1:
            raise UnsupportedModel(f"{what}: Mamba-2 with n_groups={m.n_groups}; the owned path shares B, C (n_groups 1)")
        self.limit = tuple(m.time_step_limit)
        self.in_proj, self.norm, self.out_proj = m.in_proj, m.norm, m.out_proj
        self.conv = _short_conv(m.conv1d, what)
        self.conv_bias = m.conv1d.bias
        self.conv_out = Site()
        self.A_log, self.D, self.dt_bias = m.A_log, m.D, m.dt_bias
        self.state = StateSite()
        self.core_out = Site()

    def forward(self, u: torch.Tensor) -> torch.Tensor:  # [B, T, D] -> [B, T, D]
        Di, N, P = self.Di, self.N, self.P
        z, xbc, dt = self.in_proj(u).split([Di, Di + 2 * N, self.H], dim=-1)
        c = self.conv(xbc)
        c = self.conv_out(c if self.conv_bias is None else c + self.conv_bias)
        x, Bm, Cm = F.silu(c).split([Di, N, N], dim=-1)
        delta = F.softplus(dt + self.dt_bias).clamp(*self.limit).repeat_interleave(P, dim=-1)  # [B, T, Di]
        A = (-torch.exp(self.A_log.float())).repeat_interleave(P)[:, None].expand(Di, N).contiguous()
        y = self.state(MambaState(selective_scan(x, delta, A, Bm, Cm, self.D.repeat_interleave(P)), x, delta, A, Bm, Cm)).output
        return self.out_proj(self.norm(self.core_out(y), z))
