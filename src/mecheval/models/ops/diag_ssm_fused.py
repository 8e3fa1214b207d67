"""Fused CPU diagonal SSM (numba): the math of `diag_ssm`, y = K * u, the kernel without a [H, M, T] tensor.

    K_l = 2 Re(Σ_m c_m z_m^l),  c = C ⊙ dB,  z = dA              K: [T, H]; c, z: [H, M] complex
    y[b, t, h, e] = Σ_{s ≤ t} K_{t-s, h} u[b, s, h, e]           u, y: [B, T, H, *E]

The kernel is accumulated by repeated multiplication w_l = c z^l in float64 (relative error ~ l ε, as
accurate as `diag_ssm_kernel`'s polar form for the lengths trained here), vectorised over the modes;
its backward, in torch's convention for complex gradients (∂L/∂Re + i ∂L/∂Im), is

    ∂c_m = 2 conj(Σ_l gK_l z_m^l),      ∂z_m = 2 conj(c_m Σ_{l ≥ 1} l gK_l z_m^{l-1}).

The convolution is `ops.dispatch.causal_conv`: direct (the fused short conv with T taps, O(T^2) per
channel), which beats an FFT up to T = `FFT_MIN_TAPS` (the study's T = 37), else by FFT. CPU, float32
or float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import prange

from mecheval.models.ops.diag_ssm import with_skip
from mecheval.models.ops.dispatch import causal_conv
from mecheval.models.ops.numba_kernels import parallel_kernel, use_torch_threads


@parallel_kernel(fastmath={"reassoc"})
def _kernel_fwd(zr, zi, cr, ci, K):  # pragma: no cover - compiled
    """zr, zi, cr, ci: [H, M] float64 (Re, Im of z and c); K: [T, H] float64 output. The sum over modes
    may be reassociated (vectorised)."""
    H, M = zr.shape
    for h in prange(H):
        wr, wi = cr[h].copy(), ci[h].copy()  # w = c z^l, from l = 0
        a, b = zr[h], zi[h]
        for l in range(K.shape[0]):
            acc = 0.0
            for m in range(M):
                acc += wr[m]
            K[l, h] = 2.0 * acc
            for m in range(M):
                x, y = wr[m], wi[m]
                wr[m], wi[m] = x * a[m] - y * b[m], x * b[m] + y * a[m]


@parallel_kernel(fastmath=False)
def _kernel_bwd(zr, zi, cr, ci, gK, gzr, gzi, gcr, gci):  # pragma: no cover - compiled
    """gK: [T, H] float64; gz*, gc*: [H, M] float64 outputs (Re, Im of ∂z, ∂c)."""
    H, M = zr.shape
    T = gK.shape[0]
    for h in prange(H):
        pr, pi = np.ones(M), np.zeros(M)  # p = z^l, from l = 0
        Pr, Pi, Qr, Qi = np.zeros(M), np.zeros(M), np.zeros(M), np.zeros(M)  # Σ gK_l z^l, Σ l gK_l z^{l-1}
        a, b = zr[h], zi[h]
        for l in range(T):
            g, g1 = gK[l, h], (l + 1) * gK[l + 1, h] if l + 1 < T else 0.0
            for m in range(M):
                Pr[m] += g * pr[m]
                Pi[m] += g * pi[m]
                Qr[m] += g1 * pr[m]
                Qi[m] += g1 * pi[m]
                pr[m], pi[m] = pr[m] * a[m] - pi[m] * b[m], pr[m] * b[m] + pi[m] * a[m]
        for m in range(M):
            gcr[h, m], gci[h, m] = 2.0 * Pr[m], -2.0 * Pi[m]
            gzr[h, m] = 2.0 * (cr[h, m] * Qr[m] - ci[h, m] * Qi[m])
            gzi[h, m] = -2.0 * (cr[h, m] * Qi[m] + ci[h, m] * Qr[m])


def _parts(z: torch.Tensor):
    """Complex [H, M] -> its real and imaginary parts as contiguous float64 numpy arrays."""
    z = z.detach().to(torch.complex128)
    return z.real.contiguous().numpy(), z.imag.contiguous().numpy()


class DiagSSMKernelFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, c, T: int):
        use_torch_threads()
        K = torch.empty(T, z.shape[0], dtype=torch.float64)
        _kernel_fwd(*_parts(z), *_parts(c), K.numpy())
        ctx.save_for_backward(z, c)
        return K.to(z.real.dtype)

    @staticmethod
    def backward(ctx, gK):
        z, c = ctx.saved_tensors
        use_torch_threads()
        grads = [torch.empty(z.shape, dtype=torch.float64) for _ in range(4)]
        _kernel_bwd(*_parts(z), *_parts(c), gK.to(torch.float64).contiguous().numpy(), *(g.numpy() for g in grads))
        gz, gc = torch.complex(grads[0], grads[1]), torch.complex(grads[2], grads[3])
        return gz.to(z.dtype), gc.to(c.dtype), None


def diag_ssm_kernel_fused(dA, dB, C, T: int) -> torch.Tensor:
    """K_l = 2 Re(Σ_m C_m dB_m dA_m^l), l < T -> [T, H] in dA's real dtype (as `diag_ssm_kernel`)."""
    return DiagSSMKernelFn.apply(dA, C * dB, T)


def diag_ssm_fused(u, dA, dB, C, D=None):
    """Same signature and result as `diag_ssm`: u [B, T, H, *E] real (CPU, float32/64); dA, dB, C [H, M]
    complex; D [H] or None -> y like u."""
    K = with_skip(diag_ssm_kernel_fused(dA, dB, C, u.shape[1]), D)  # [T, H]
    E = math.prod(u.shape[3:])  # channel h's kernel serves its E entries
    return causal_conv(u.flatten(2), K.repeat_interleave(E, dim=1).to(u.dtype)).view_as(u)
