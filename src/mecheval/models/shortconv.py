"""The causal convolution component shared by every mixer that has one.

`make_conv(spec, channels, max_len)` is the single switch behind the `d_conv` ablation:
  0       -> None (no convolution, no parameters)
  k >= 1  -> ShortConv: causal depthwise conv of kernel k
  "long"  -> LongConv: an implicit long convolution (see `longconv.py`)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mecheval.models.ops.dispatch import short_conv
from mecheval.models.ops.fft_conv import FFT_MIN_TAPS, fft_conv
from mecheval.models.sites import Site

ConvSpec = int | str


class ShortConv(nn.Module):
    """Causal depthwise convolution over time, no bias.

    y[b, t, c] = sum_{j=0}^{k-1} w[c, j] * x[b, t - (k-1) + j, c]   (x = 0 before t = 0)
    x, y: [B, T, C]; weight: [C, 1, k] (the layout of a depthwise `nn.Conv1d`); lag j = t - t' is
    tap w[c, k-1-j]. Site `conv_in` carries x (the mixer names the output `conv_out`).
    """

    def __init__(self, channels: int, kernel_size: int) -> None:
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
        self.channels, self.kernel_size = channels, kernel_size
        bound = 1 / math.sqrt(kernel_size)
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel_size).uniform_(-bound, bound))
        self.conv_in = Site()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(x)
        T = x.shape[1]
        k = min(self.kernel_size, T)  # taps reaching before t = 0 only ever meet zeros: skip them
        w = self.weight[..., -k:]
        if k > FFT_MIN_TAPS:  # a long kernel (e.g. H3's shift SSM of state 1024): O(T log T) by FFT
            return fft_conv(x, F.pad(w[:, 0].flip(-1).T, (0, 0, 0, T - k)))  # filter [T, C], lag-major
        return short_conv(x, w)  # the fused CPU kernel where it applies, else F.conv1d (ops.dispatch)

    def init_state(self, batch_size: int, device=None, dtype=None) -> torch.Tensor:
        """The last k-1 inputs: [B, C, k-1]."""
        return torch.zeros(batch_size, self.channels, self.kernel_size - 1, device=device, dtype=dtype)

    def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x_t: [B, C] -> (y_t [B, C], new state [B, C, k-1])."""
        window = torch.cat([state, x_t.unsqueeze(-1)], dim=-1)  # [B, C, k]
        y = (window * self.weight.squeeze(1)).sum(-1)
        return y, window[..., 1:]

    def extra_repr(self) -> str:
        return f"channels={self.channels}, kernel_size={self.kernel_size}"


def validate_conv_spec(spec: ConvSpec) -> ConvSpec:
    """0, a positive int, or "long"; anything else raises ValueError."""
    if spec == "long" or (isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0):
        return spec
    raise ValueError(f"d_conv must be 0 (no conv), a kernel size >= 1, or 'long'; got {spec!r}")


def make_conv(spec: ConvSpec, channels: int, max_len: int) -> nn.Module | None:
    """The convolution for `spec` over `channels` channels (None for 0). See module docstring."""
    spec = validate_conv_spec(spec)
    if spec == 0:
        return None
    if spec == "long":
        from mecheval.models.longconv import LongConv

        return LongConv(channels, max_len)
    return ShortConv(channels, spec)


def short_conv_bias(conv: nn.Module | None, spec: ConvSpec, mixer: str) -> nn.Parameter:
    """A bias added after the short conv `conv` (made from `spec`) [channels], drawn as `nn.Conv1d` draws its bias,
    U(±1/√k): the conv bias of mamba_ssm's and zoology's Conv1d. ValueError where `conv` is not a short conv."""
    if not isinstance(conv, ShortConv):
        raise ValueError(f"{mixer} conv_bias needs a short conv (d_conv >= 1), got d_conv={spec!r}")
    bound = conv.kernel_size**-0.5
    return nn.Parameter(torch.empty(conv.channels).uniform_(-bound, bound))
