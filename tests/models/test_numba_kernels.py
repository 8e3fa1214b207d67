"""Every fused kernel's serial twin (taken on one thread) computes what its parallel compilation computes,
outputs and gradients, and the call picks the twin by numba's thread count."""

from __future__ import annotations

import os
import subprocess
import sys

import numba
import pytest
import torch

from mecheval.models.ops import numba_kernels
from mecheval.models.ops.delta_rule_fused import delta_rule_fused
from mecheval.models.ops.diag_ssm_fused import diag_ssm_fused
from mecheval.models.ops.row_norm_fused import ROWS, rms_norm_fused
from mecheval.models.ops.selective_scan_fused import selective_scan_fused
from mecheval.models.ops.short_conv_fused import short_conv_fused
from mecheval.models.ops.small_matmul_fused import small_matmul_fused

from .test_diag_ssm_fused import ssm_inputs
from .test_fused_kernels import scan_inputs
from .test_ops import delta_inputs
from .test_short_conv_fused import conv_inputs


def op_inputs(name):
    """(fused op, its inputs requiring grad) at sizes with several work items (batch rows, channel blocks,
    heads, blocks of matrices)."""
    if name == "selective_scan":
        return selective_scan_fused, scan_inputs(3, 9, 40, 5, seed=0)
    if name == "delta_rule":
        return delta_rule_fused, [x.requires_grad_() for x in delta_inputs(3, 21, 2, 8, 6, seed=0)]
    if name == "short_conv":
        return short_conv_fused, list(conv_inputs(3, 11, 7, 4, seed=0))
    if name == "small_matmul":
        g = torch.Generator().manual_seed(0)
        return small_matmul_fused, [torch.randn(5000, *s, generator=g).requires_grad_() for s in ((2, 1), (1, 2))]
    if name == "diag_ssm":
        return diag_ssm_fused, ssm_inputs(2, 9, 3, 6, (2,), seed=0)
    if name == "row_norm":
        g = torch.Generator().manual_seed(0)
        x, w = torch.randn(3 * ROWS + 1, 12, generator=g), torch.randn(12, generator=g)
        return (lambda x, w: rms_norm_fused(x, w, 1e-5)), [x.requires_grad_(), w.requires_grad_()]
    raise KeyError(name)


def outputs_and_grads(op, xs, threads):
    torch.set_num_threads(threads)
    y = op(*xs)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=y.dtype)
    return [y.detach(), *torch.autograd.grad(y, xs, gy)]


@pytest.mark.parametrize("name", ["selective_scan", "delta_rule", "short_conv", "small_matmul", "diag_ssm", "row_norm"])
def test_serial_twin_equals_the_parallel_kernel(name, monkeypatch):
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here: only the serial twin runs")
    calls = []
    original = numba_kernels.ParallelKernel.__call__

    def spy(self, *args):
        calls.append("serial" if numba.get_num_threads() == 1 else "parallel")
        return original(self, *args)

    monkeypatch.setattr(numba_kernels.ParallelKernel, "__call__", spy)
    threads = torch.get_num_threads()
    try:
        op, xs = op_inputs(name)
        one = outputs_and_grads(op, xs, 1)
        ran_serial, calls[:] = set(calls), []
        two = outputs_and_grads(op, xs, 2)
        ran_parallel = set(calls)
    finally:
        torch.set_num_threads(threads)
    assert ran_serial == {"serial"} and ran_parallel == {"parallel"}
    for a, b in zip(one, two):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6 * b.abs().max().item())


def test_twins_are_cached_under_their_own_names():
    """numba's on-disk cache is keyed by the function's qualified name: one name for both would let a
    process load the parallel machine code for the serial twin (or the reverse)."""
    from mecheval.models.ops.short_conv_fused import _conv_fwd

    assert _conv_fwd.serial.py_func.__qualname__ != _conv_fwd.parallel.py_func.__qualname__
    assert _conv_fwd.serial.py_func.__code__ is _conv_fwd.parallel.py_func.__code__
    assert _conv_fwd.serial.targetoptions.get("parallel", False) is False
    assert _conv_fwd.parallel.targetoptions["parallel"] is True


VECTOR_WIDTH_PROBE = """
import os, numba
from numba.core.codegen import get_host_cpu_features
from mecheval.models.ops import numba_kernels
print(numba.config.CPU_FEATURES, "+avx512f" in get_host_cpu_features().split(","), sep="\\n")
"""


@pytest.mark.parametrize("user_setting", [None, "+sse2"])
def test_512_bit_vectors_only_where_the_cpu_has_them_and_the_user_has_not_chosen(user_setting):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CPU_FEATURES"}
    if user_setting is not None:
        env["NUMBA_CPU_FEATURES"] = user_setting
    out = subprocess.run([sys.executable, "-c", VECTOR_WIDTH_PROBE], env=env, capture_output=True, text=True, check=True)
    features, avx512 = out.stdout.split()
    if user_setting is not None:
        assert features == user_setting
    elif avx512 == "True":
        assert features.endswith(",-prefer-256-bit") and "+avx512f" in features.split(",")
    else:
        assert features == "None"
