"""The fused CPU delta rule equals the chunkwise reference and the per-step loop (outputs and gradients);
DeltaNet dispatches to it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mecheval.models.ops.delta_rule import delta_rule, delta_rule_loop
from mecheval.models.ops.delta_rule_fused import TC, delta_rule_fused

from .test_fused_kernels import assert_rel_close
from .test_ops import delta_inputs, grads


@settings(max_examples=15, deadline=None)
@given(
    B=st.integers(1, 3), T=st.integers(1, 3 * TC + 3), H=st.integers(1, 3), dk=st.integers(1, 20), dv=st.integers(1, 20),
    seed=st.integers(0, 2**16),
)
@example(B=2, T=37, H=1, dk=64, dv=64, seed=0)  # the published DeltaNet (1 head, d=64) at T = 37: 3 chunks
def test_fused_equals_reference_outputs_and_gradients(B, T, H, dk, dv, seed):
    args = delta_inputs(B, T, H, dk, dv, seed)
    fused = grads(delta_rule_fused, args, seed)
    for reference in (delta_rule, delta_rule_loop):
        for name, f, r in zip(["o", "q", "k", "v", "beta"], fused, grads(reference, args, seed)):
            assert_rel_close(f, r, rtol=1e-4, name=f"{name} vs {reference.__name__}")


@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1), (2, 5, 2, 3, 4), (1, TC + 3, 1, 4, 2)])
def test_gradcheck_float64(shape):
    args = [a.double().requires_grad_() for a in delta_inputs(*shape, seed=3)]
    assert torch.autograd.gradcheck(delta_rule_fused, args)


def test_long_sequence_float32():
    """The backward walks S back from each chunk's saved state: no drift over many chunks."""
    args = delta_inputs(2, 6 * TC + 1, 1, 33, 17, seed=1)
    for name, f, r in zip(["o", "q", "k", "v", "beta"], grads(delta_rule_fused, args, 1), grads(delta_rule_loop, args, 1)):
        assert_rel_close(f, r, rtol=1e-4, name=name)


@pytest.mark.parametrize("d", [16, 7])
def test_same_inputs_give_the_same_bits_wherever_the_heap_puts_the_scratch(d):
    """A vectorised sum in a loop that also stores takes LLVM's scalar fallback when the runtime alias check
    finds two arrays within a few vectors of each other, and sums in another order there: the backward's
    scratch rows, allocated afresh each call, once made ∂β differ in its last bits between calls (at d = 16,
    most calls here); d = 7 takes the backward's loop over an odd last row."""
    args = delta_inputs(4, 9, 1, d, d, seed=2)
    first = grads(delta_rule_fused, args, 2)
    rng, held = np.random.default_rng(0), []
    for _ in range(40):
        held.append(np.empty(rng.integers(1, 2000), np.uint8))  # another heap layout for each call
        assert all(torch.equal(a, b) for a, b in zip(grads(delta_rule_fused, args, 2), first, strict=True))
