"""Causal long convolution, one filter per channel:

    y[b, t, c] = sum_{s=0}^{t} h[t - s, c] * u[b, s, c]          u, y: [B, T, C]; h: [T, C]

`fft_conv` computes it in O(T log T) by zero-padding to 2T (so the circular convolution of the FFT
is the linear one) and keeping the first T outputs; `fft_conv_direct` is the O(T^2) reference.
"""

from __future__ import annotations

import torch

FFT_MIN_TAPS = 64  # causal convs with more taps go by FFT; fewer, direct (faster on CPU up to about here)


def fft_conv(u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """u [B, T, C], h [T, C] -> y [B, T, C] via FFT (computed in at least float32)."""
    T = u.shape[1]
    if h.shape[0] != T:
        raise ValueError(f"filter length {h.shape[0]} != sequence length {T}")
    n = 2 * T
    dtype = torch.promote_types(u.dtype, torch.float32)
    # Time on the last (contiguous) axis: about twice as fast on CPU as transforming dim 1.
    u_f = torch.fft.rfft(u.transpose(1, 2).to(dtype), n=n)  # [B, C, n/2 + 1]
    h_f = torch.fft.rfft(h.t().to(dtype), n=n)  # [C, n/2 + 1]
    return torch.fft.irfft(u_f * h_f, n=n)[..., :T].transpose(1, 2).to(u.dtype)


def fft_conv_direct(u: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The same convolution as a lower-triangular Toeplitz product (the reference): [B, T, C]."""
    T = u.shape[1]
    lag = torch.arange(T, device=u.device)[:, None] - torch.arange(T, device=u.device)[None, :]  # t - s
    toeplitz = h[lag.clamp(min=0)] * (lag >= 0)[..., None].to(h.dtype)  # [T, T, C]
    return torch.einsum("tsc,bsc->btc", toeplitz, u)
