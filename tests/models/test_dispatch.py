"""Each mixer with a fused CPU kernel dispatches to it by default, and `kernel_mode("reference")` switches
it back to the readable reference; both give the same output."""

from __future__ import annotations

import pytest
import torch

from mecheval.models.ops import dispatch

from .conftest import build, make_config, random_tokens
from .test_fused_kernels import assert_rel_close


def autograd_nodes(y: torch.Tensor) -> set[str]:
    """Names of every node in y's autograd graph (e.g. "DiagSSMKernelFnBackward" -> "DiagSSMKernelFn")."""
    seen, todo = set(), [y.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(n for n, _ in node.next_functions)
    return {n.name().removesuffix("Backward") for n in seen}


@pytest.mark.parametrize("config, kernel", [(("deltanet", 4), "DeltaRuleFn"), (("h3", 3), "BilinearSSMKernelFn"),
                                            (("h3", 3), "SmallMatmulFn"), (("hyena",), "ShortConvFn")])
def test_mixer_dispatches_and_reference_mode_switches(config, kernel, monkeypatch):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    lm = build(make_config(*config))
    tokens = random_tokens(2, 12, seed=0)
    y = lm(tokens)
    assert kernel in autograd_nodes(y)
    with dispatch.kernel_mode("reference"):
        y_ref = lm(tokens)
    assert kernel not in autograd_nodes(y_ref)
    assert_rel_close(y, y_ref, rtol=1e-4)
