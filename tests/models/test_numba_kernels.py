"""Every fused kernel's serial twin (taken on one thread) computes what its parallel compilation computes,
outputs and gradients, and the call picks the twin by numba's thread count."""

from __future__ import annotations

import numba
import pytest
import torch
import torch.nn.functional as F

from mecheval.models.ops import numba_kernels
from mecheval.models.ops.delta_rule_fused import delta_rule_fused
from mecheval.models.ops.diag_ssm_fused import diag_ssm_fused
from mecheval.models.ops.selective_scan_fused import selective_scan_fused
from mecheval.models.ops.short_conv_fused import short_conv_fused
from mecheval.models.ops.small_matmul_fused import small_matmul_fused

from .test_fused_kernels import scan_inputs


def _randn(g, *shape, positive=False):
    x = torch.randn(*shape, generator=g)
    return (F.softplus(x) if positive else x).requires_grad_()


def _complex(g, *shape, radius=1.0):
    return (radius * torch.polar(torch.rand(*shape, generator=g), 6 * torch.rand(*shape, generator=g))).requires_grad_()


def op_inputs(name, g):
    """(fused op, its inputs) at sizes with several work items (batch rows, channel blocks, heads)."""
    if name == "selective_scan":
        return selective_scan_fused, scan_inputs(3, 9, 40, 5, seed=int(torch.randint(2**16, (1,), generator=g)))
    if name == "delta_rule":
        return delta_rule_fused, [_randn(g, 3, 21, 2, 8), F.normalize(_randn(g, 3, 21, 2, 8), dim=-1).detach().requires_grad_(),
                                  _randn(g, 3, 21, 2, 6), torch.sigmoid(_randn(g, 3, 21, 2)).detach().requires_grad_()]
    if name == "short_conv":
        return short_conv_fused, [_randn(g, 3, 11, 7), _randn(g, 7, 1, 4)]
    if name == "small_matmul":
        return small_matmul_fused, [_randn(g, 5000, 2, 1), _randn(g, 5000, 1, 2)]  # 3 blocks of matrices
    if name == "diag_ssm":
        return (lambda u, dA, dB, C: diag_ssm_fused(u, dA, dB, C)), [_randn(g, 2, 9, 3, 2), _complex(g, 3, 6, radius=0.9),
                                                                    _complex(g, 3, 6), _complex(g, 3, 6)]
    raise KeyError(name)


def outputs_and_grads(op, xs, threads):
    torch.set_num_threads(threads)
    y = op(*xs)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=y.dtype)
    return [y.detach(), *torch.autograd.grad(y, xs, gy)]


@pytest.mark.parametrize("name", ["selective_scan", "delta_rule", "short_conv", "small_matmul", "diag_ssm"])
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
        op, xs = op_inputs(name, torch.Generator().manual_seed(0))
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
