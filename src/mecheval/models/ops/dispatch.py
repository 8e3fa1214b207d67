"""Kernel selection: one function per op, called by the mixers; the choice never changes the math.

`MECHEVAL_KERNELS` (or the `kernel_mode` context manager, which wins over it) picks the path:
    auto       (default) CPU: the fused numba kernels; CUDA: `mamba_ssm`'s kernel when importable,
               else the pure-PyTorch op. Inputs of another dtype (half, bfloat16, mixed) or on other
               devices take the pure-PyTorch op: no dtype is ever forced.
    reference  always the pure-PyTorch op (readable, what the tests compare against).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
import torch.nn.functional as F

from mecheval.models.ops import delta_rule as reference_delta_rule
from mecheval.models.ops import diag_ssm as reference_diag_ssm
from mecheval.models.ops import selective_scan as reference
from mecheval.models.ops import short_conv as reference_conv
from mecheval.models.ops.fft_conv import fft_conv

MODES = ("auto", "reference")
ENV_VAR = "MECHEVAL_KERNELS"
_override: ContextVar[str | None] = ContextVar("mecheval_kernel_mode", default=None)


def _check(mode: str, source: str) -> str:
    if mode not in MODES:
        raise ValueError(f"{source}={mode!r}: expected one of {MODES}")
    return mode


def current_mode() -> str:
    """The active mode: the innermost `kernel_mode`, else $MECHEVAL_KERNELS, else "auto"."""
    mode = _override.get()
    if mode is not None:
        return mode
    return _check(os.environ.get(ENV_VAR, "auto").strip().lower() or "auto", ENV_VAR)


@contextmanager
def kernel_mode(mode: str) -> Iterator[None]:
    """Use `mode` ("auto" or "reference") for the ops called inside the block."""
    token = _override.set(_check(mode, "kernel_mode"))
    try:
        yield
    finally:
        _override.reset(token)


@functools.cache
def _mamba_ssm_scan():
    """`mamba_ssm.selective_scan_fn` or None when the package (or its CUDA build) is missing."""
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except ImportError:
        return None
    return selective_scan_fn


def _fused_cpu_ok(*tensors: torch.Tensor) -> bool:
    dtype = tensors[0].dtype
    return dtype in (torch.float32, torch.float64) and all(t.device.type == "cpu" and t.dtype == dtype for t in tensors)


def selective_scan(u, delta, A, Bm, Cm, D):
    """Mamba's selective scan, same signature and result as `ops.selective_scan.selective_scan`:
    u, delta [B, T, Di]; A [Di, N]; Bm, Cm [B, T, N]; D [Di] -> y [B, T, Di]."""
    if current_mode() == "auto":
        if _fused_cpu_ok(u, delta, A, Bm, Cm, D):
            from mecheval.models.ops.selective_scan_fused import selective_scan_fused  # numba compiles lazily

            return selective_scan_fused(u, delta, A, Bm, Cm, D)
        if u.is_cuda and (fn := _mamba_ssm_scan()) is not None:  # layout [B, Di, T] / [B, N, T]
            y = fn(u.mT, delta.mT, A, Bm.mT, Cm.mT, D)
            return y.mT
    return reference.selective_scan(u, delta, A, Bm, Cm, D)


def short_conv(x, weight):
    """Causal depthwise conv, same result as `ops.short_conv.short_conv`: x [B, T, C]; weight [C, 1, k]
    -> y [B, T, C]. On CPU the fused kernel (no transposes, per-row ∂w partials); else `F.conv1d`."""
    if current_mode() == "auto" and _fused_cpu_ok(x, weight):
        from mecheval.models.ops.short_conv_fused import short_conv_fused  # numba compiles lazily

        return short_conv_fused(x, weight)
    return reference_conv.short_conv(x, weight)


def causal_conv(u, h):
    """Causal long convolution, same result as `ops.fft_conv.fft_conv`: u [B, T, C]; h [T, C] -> y [B, T, C].
    On CPU `short_conv_fused.causal_conv_fused` (direct up to `fft_conv.FFT_MIN_TAPS` steps); else by FFT."""
    if current_mode() == "auto" and _fused_cpu_ok(u, h):
        from mecheval.models.ops.short_conv_fused import causal_conv_fused  # numba compiles lazily

        return causal_conv_fused(u, h)
    return fft_conv(u, h)


def diag_ssm(u, dA, dB, C, D=None):
    """H3's diagonal SSM plus the skip D u, same result as `ops.diag_ssm.diag_ssm`: u [B, T, H, *E] real;
    dA, dB, C [H, M] complex; D [H] or None -> y like u. On CPU the fused kernel (by recurrence; a direct
    conv up to FFT_MIN_TAPS steps); else the kernel in polar form, convolved by FFT."""
    if current_mode() == "auto" and _fused_cpu_ok(u) and all(p.device.type == "cpu" for p in (dA, dB, C)):
        from mecheval.models.ops.diag_ssm_fused import diag_ssm_fused  # numba compiles lazily

        return diag_ssm_fused(u, dA, dB, C, D)
    return reference_diag_ssm.diag_ssm(u, dA, dB, C, D)


def diag_ssm_bilinear(u, log_dt, log_A_real, A_imag, B, C, D=None):
    """H3's SSM from its S4D-Lin parameters, `diag_ssm(u, *ops.diag_ssm.bilinear(log_dt, log_A_real, A_imag,
    B, C), D)`: u [B, T, H, *E] real; log_dt [H]; log_A_real, A_imag [H, M]; B, C [H, M, 2] -> y like u. On
    CPU one fused computation of the kernel from the parameters (discretisation included, both ways)."""
    params = (log_dt, log_A_real, A_imag, B, C)
    if current_mode() == "auto" and _fused_cpu_ok(u) and all(p.device.type == "cpu" and p.is_floating_point() for p in params):
        from mecheval.models.ops.diag_ssm_fused import diag_ssm_bilinear_fused  # numba compiles lazily

        return diag_ssm_bilinear_fused(u, *params, D)
    return reference_diag_ssm.diag_ssm(u, *reference_diag_ssm.bilinear(*params), D)


def delta_rule(q, k, v, beta, g=None):
    """The (gated) delta rule, same result as `ops.delta_rule.delta_rule`: q, k [B, T, H, d_k]; v [B, T, H, d_v];
    beta, g (log α, None: α = 1) [B, T, H] -> o [B, T, H, d_v]. On CPU without a gate the fused recurrence;
    else the chunkwise (WY) form."""
    if g is None and current_mode() == "auto" and _fused_cpu_ok(q, k, v, beta):
        from mecheval.models.ops.delta_rule_fused import delta_rule_fused  # numba compiles lazily

        return delta_rule_fused(q, k, v, beta)
    return reference_delta_rule.delta_rule(q, k, v, beta, g)


def rms_norm(x, weight, eps: float):
    """RMSNorm over the last dim, `F.rms_norm(x, (d,), weight, eps)`: x [..., d], weight [d] -> [..., d].
    On CPU the fused kernel (its backward one pass, where autograd's takes many ops)."""
    if current_mode() == "auto" and _fused_cpu_ok(x, weight):
        from mecheval.models.ops.row_norm_fused import rms_norm_fused  # numba compiles lazily

        return rms_norm_fused(x, weight, eps)
    return F.rms_norm(x, x.shape[-1:], weight, eps)


def l2_normalize(x, scale: float = 1.0, eps: float = 1e-12):
    """`F.normalize(x, dim=-1, eps=eps) * scale`: x [..., d] -> [..., d]. On CPU the fused kernel."""
    if current_mode() == "auto" and _fused_cpu_ok(x):
        from mecheval.models.ops.row_norm_fused import l2_normalize_fused  # numba compiles lazily

        return l2_normalize_fused(x, scale, eps)
    return F.normalize(x, dim=-1, eps=eps) * scale


def small_matmul(a, b):
    """`a @ b` for many tiny matrices: a [..., m, k], b [..., k, n] -> [..., m, n] (leading dims broadcast).
    On CPU the fused kernel (one loop over all matrices instead of a gemm call each); else `torch.matmul`."""
    if current_mode() == "auto" and _fused_cpu_ok(a, b):
        from mecheval.models.ops.small_matmul_fused import small_matmul_fused  # numba compiles lazily

        return small_matmul_fused(a, b)
    return a @ b
