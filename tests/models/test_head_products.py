"""The fused per-head outer product and contraction equal their batched-matmul references (outputs and
gradients); H3 dispatches to them."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models.ops import dispatch
from mecheval.models.ops.head_products import contract_fused, contract_reference, outer_fused, outer_reference

from .conftest import build, make_config, random_tokens
from .test_diag_ssm_fused import autograd_nodes
from .test_fused_kernels import assert_rel_close


def heads(lead, H, d, seed, dtype=torch.float32, square=False):
    """[*lead, H, d] (or [*lead, H, d, d]) taken as a strided slice, as the mixers pass q, k, v."""
    shape = (*lead, H, d, d) if square else (*lead, H, 2 * d)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return (x if square else x[..., :d]).requires_grad_()


@settings(max_examples=15, deadline=None)
@given(
    lead=st.sampled_from([(1,), (3,), (2, 5), (32, 37)]), H=st.integers(1, 4), d=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_fused_equals_reference_outputs_and_gradients(lead, H, d, seed):
    a, b, s = heads(lead, H, d, seed), heads(lead, H, d, seed + 1), heads(lead, H, d, seed + 2, square=True)
    for fused, reference, args in ((outer_fused, outer_reference, (a, b)), (contract_fused, contract_reference, (a, s))):
        y, y_ref = fused(*args), reference(*args)
        assert_rel_close(y, y_ref, name=f"{fused.__name__} y")
        g = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed + 3))
        for name, gf, gr in zip("ab", torch.autograd.grad(y, args, g), torch.autograd.grad(y_ref, args, g)):
            assert_rel_close(gf, gr, name=f"{fused.__name__} d{name}")


@pytest.mark.parametrize(("lead", "H", "d"), [((1,), 1, 1), ((2, 3), 2, 2), ((4,), 3, 3)])
def test_gradcheck_float64(lead, H, d):
    a, b = heads(lead, H, d, 0, torch.float64), heads(lead, H, d, 1, torch.float64)
    s = heads(lead, H, d, 2, torch.float64, square=True)
    assert torch.autograd.gradcheck(outer_fused, (a, b))
    assert torch.autograd.gradcheck(contract_fused, (a, s))


def test_h3_dispatches_and_reference_mode_switches(monkeypatch):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    lm = build(make_config("h3", 3))
    tokens = random_tokens(2, 12, seed=0)
    y = lm(tokens)
    assert {"OuterFn", "ContractFn"} <= autograd_nodes(y)
    with dispatch.kernel_mode("reference"):
        assert not {"OuterFn", "ContractFn"} & autograd_nodes(lm(tokens))
