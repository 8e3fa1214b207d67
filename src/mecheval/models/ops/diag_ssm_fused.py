"""Fused CPU diagonal SSM (numba): the math of `diag_ssm`, y = K * u, the kernel without a [H, M, T] tensor.

    K_l = 2 Re(Σ_m c_m z_m^l),  c = C ⊙ dB,  z = dA              K: [T, H]; c, z: [H, M] complex
    y[b, t, h, e] = Σ_{s ≤ t} K_{t-s, h} u[b, s, h, e]           u, y: [B, T, H, *E]

The kernel is accumulated by repeated multiplication w_l = c z^l in float64 (relative error ~ l ε, as
accurate as `diag_ssm_kernel`'s polar form for the lengths trained here), vectorised over the modes;
its backward, in torch's convention for complex gradients (∂L/∂Re + i ∂L/∂Im), is

    ∂c_m = 2 conj(Σ_l gK_l z_m^l),      ∂z_m = 2 conj(c_m Σ_{l ≥ 1} l gK_l z_m^{l-1}).

The convolution is `short_conv_fused.causal_conv_fused`: direct (the fused short conv with T taps, O(T^2)
per channel), which beats an FFT up to T = `FFT_MIN_TAPS` (the study's T = 37), else by FFT. CPU, float32
or float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from mecheval.models.ops.diag_ssm import with_skip
from mecheval.models.ops.numba_kernels import as_numpy, parallel_kernel, use_torch_threads
from mecheval.models.ops.short_conv_fused import causal_conv_fused


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


@njit(cache=True)
def _bilinear_fwd(log_dt, ear, aim, B, C, zr, zi, cr, ci, invr, invi):  # pragma: no cover - compiled
    """`ops.diag_ssm.bilinear` in float64 (as real and imaginary parts): z = dA, c = C dB, and inv =
    1 / (1 - w), w = Δ a / 2, a = -ear + i aim, ear = exp(log_A_real) (float64, computed by numpy's vectorised
    exp). Inputs as H3 holds them (any float dtype): log_dt [H]; aim [H, M]; B, C [H, M, 2]. Outputs [H, M]
    float64."""
    H, M = ear.shape
    for h in range(H):
        dt = math.exp(log_dt[h])
        for m in range(M):
            wr, wi = -0.5 * dt * ear[h, m], 0.5 * dt * aim[h, m]
            d2 = (1.0 - wr) ** 2 + wi**2
            ir, ii = (1.0 - wr) / d2, wi / d2
            invr[h, m], invi[h, m] = ir, ii
            zr[h, m], zi[h, m] = 2.0 * ir - 1.0, 2.0 * ii
            br, bi = dt * (B[h, m, 0] * ir - B[h, m, 1] * ii), dt * (B[h, m, 0] * ii + B[h, m, 1] * ir)  # dB
            cr[h, m], ci[h, m] = C[h, m, 0] * br - C[h, m, 1] * bi, C[h, m, 0] * bi + C[h, m, 1] * br


@njit(cache=True)
def _bilinear_bwd(log_dt, ear, aim, B, C, invr, invi, gzr, gzi, gcr, gci, g_log_dt, g_lar, g_aim, gB, gC):  # pragma: no cover
    """The parameters' gradients from those of z and c (torch's convention: ∂L/∂Re + i ∂L/∂Im, so a factor
    p of a product passes conj(other factors) · G, and a holomorphic f passes conj(f') · G):

        G_C = conj(dB) G_c,   G_B = conj(C Δ inv) G_c,   G_inv = 2 G_z + conj(C B Δ) G_c
        G_y = conj(inv² / 2) G_inv  (y = Δ a),   G_Δ = Σ_m Re(conj(C B inv) G_c) + Re(conj(a) G_y)
        G_a = Δ G_y,   ∂lar = -exp(lar) Re(G_a),   ∂aim = Im(G_a),   ∂log_dt = Δ G_Δ

    Outputs (float64): g_log_dt [H]; g_lar, g_aim [H, M]; gB, gC [H, M, 2]."""
    H, M = ear.shape
    for h in range(H):
        dt, gdt = math.exp(log_dt[h]), 0.0
        for m in range(M):
            ir, ii, Gr, Gi = invr[h, m], invi[h, m], gcr[h, m], gci[h, m]
            Br, Bi, Cr, Ci = B[h, m, 0], B[h, m, 1], C[h, m, 0], C[h, m, 1]
            dbr, dbi = dt * (Br * ir - Bi * ii), dt * (Br * ii + Bi * ir)
            gC[h, m, 0], gC[h, m, 1] = dbr * Gr + dbi * Gi, dbr * Gi - dbi * Gr
            qr, qi = dt * (Cr * ir - Ci * ii), dt * (Cr * ii + Ci * ir)
            gB[h, m, 0], gB[h, m, 1] = qr * Gr + qi * Gi, qr * Gi - qi * Gr
            cbr, cbi = Cr * Br - Ci * Bi, Cr * Bi + Ci * Br
            gdt += (cbr * ir - cbi * ii) * Gr + (cbr * ii + cbi * ir) * Gi
            Gir, Gii = 2.0 * gzr[h, m] + dt * (cbr * Gr + cbi * Gi), 2.0 * gzi[h, m] + dt * (cbr * Gi - cbi * Gr)
            sr, si = 0.5 * (ir * ir - ii * ii), ir * ii
            Gyr, Gyi = sr * Gir + si * Gii, sr * Gii - si * Gir
            ar = -ear[h, m]
            gdt += ar * Gyr + aim[h, m] * Gyi
            g_lar[h, m], g_aim[h, m] = ar * dt * Gyr, dt * Gyi
        g_log_dt[h] = dt * gdt


class BilinearSSMKernelFn(torch.autograd.Function):
    """K [T, H] straight from S4D-Lin's parameters: `_bilinear_fwd`, then `_kernel_fwd`; backward the reverse."""

    @staticmethod
    def forward(ctx, log_dt, log_A_real, A_imag, B, C, T: int):
        use_torch_threads()
        ear = np.exp(as_numpy(log_A_real).astype(np.float64))
        parts = [np.empty(log_A_real.shape) for _ in range(6)] + [ear]  # zr, zi, cr, ci, invr, invi, exp(log_A_real)
        _bilinear_fwd(as_numpy(log_dt), ear, *(as_numpy(p) for p in (A_imag, B, C)), *parts[:6])
        K = np.empty((T, log_A_real.shape[0]))
        _kernel_fwd(*parts[:4], K)
        ctx.save_for_backward(log_dt, log_A_real, A_imag, B, C)
        ctx.parts = parts
        return torch.from_numpy(K).to(log_A_real.dtype)

    @staticmethod
    def backward(ctx, gK):
        use_torch_threads()
        parts, shape = ctx.parts, ctx.parts[0].shape
        gzc = [np.empty(shape) for _ in range(4)]
        _kernel_bwd(*parts[:4], gK.to(torch.float64).contiguous().numpy(), *gzc)
        params = ctx.saved_tensors
        grads = [np.empty(p.shape) for p in params]
        log_dt, _, A_imag, B, C = (as_numpy(p) for p in params)
        _bilinear_bwd(log_dt, parts[6], A_imag, B, C, parts[4], parts[5], *gzc, *grads)
        return (*(torch.from_numpy(g).to(p.dtype) for g, p in zip(grads, params)), None)


def diag_ssm_kernel_fused(dA, dB, C, T: int) -> torch.Tensor:
    """K_l = 2 Re(Σ_m C_m dB_m dA_m^l), l < T -> [T, H] in dA's real dtype (as `diag_ssm_kernel`)."""
    return DiagSSMKernelFn.apply(dA, C * dB, T)


def _convolve(u, K):
    """u [B, T, H, *E] by the kernel K [T, H] (channel h's kernel serves its E entries) -> like u."""
    E = math.prod(u.shape[3:])
    return causal_conv_fused(u.flatten(2), K.repeat_interleave(E, dim=1).to(u.dtype)).view_as(u)


def diag_ssm_fused(u, dA, dB, C, D=None):
    """Same signature and result as `diag_ssm`: u [B, T, H, *E] real (CPU, float32/64); dA, dB, C [H, M]
    complex; D [H] or None -> y like u."""
    return _convolve(u, with_skip(diag_ssm_kernel_fused(dA, dB, C, u.shape[1]), D))


def diag_ssm_bilinear_fused(u, log_dt, log_A_real, A_imag, B, C, D=None):
    """`diag_ssm(u, *bilinear(log_dt, log_A_real, A_imag, B, C), D)` with the discretisation inside the
    kernel's computation (torch's complex ops and their autograd cost more than the kernel at H3's
    512 modes): u [B, T, H, *E] real (CPU, float32/64); parameters as `ops.diag_ssm.bilinear` -> y like u."""
    K = BilinearSSMKernelFn.apply(log_dt, log_A_real, A_imag, B, C, u.shape[1])
    return _convolve(u, with_skip(K, D))
