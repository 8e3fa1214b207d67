"""Our Mamba blocks equal the mambapy reference (alxndrTL/mamba.py) given the same weights, forward and
backward, and so does the whole LM at the study's init with mambapy's blocks swapped in (issue 18's
reference run, `examples/mambapy_reference_run.py`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

from .conftest import build, make_config, random_tokens

mambapy = pytest.importorskip("mambapy.mamba")
EXAMPLE = Path(__file__).parents[2] / "examples" / "mambapy_reference_run.py"


def reference_run_module():
    spec = importlib.util.spec_from_file_location("mambapy_reference_run", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("d_conv,conv_bias", [(2, False), (4, False), (4, True)])
def test_mamba_blocks_equal_mambapy_with_copied_weights(d_conv, conv_bias):
    lm = build(make_config("mamba", d_conv, d_model=32, options={"mamba": {"conv_bias": conv_bias}}))
    ref = reference_run_module().with_mambapy_blocks(lm)
    with torch.no_grad():
        x = torch.randn(3, 37, 32, generator=torch.Generator().manual_seed(0))
        ours, theirs = x, x
        for a, b in zip(lm.layers, ref.layers):
            ours, theirs = a(ours), b.finish(*b.mix(theirs))
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("norm_eps,close", [(1e-5, True), (None, False)])
def test_study_init_lm_equals_mambapy_blocks_forward_and_gradients(norm_eps, close):
    """At the study's init (residual std ~0.02) the LMs agree only with mambapy's RMSNorm eps (1e-5)."""
    cfg = make_config("mamba", d_model=32, vocab_size=256, init="zoology", final_norm="layernorm",
                      norm_eps=norm_eps, options={"mamba": {"conv_bias": True}})
    ours = build(cfg)
    ref = reference_run_module().with_mambapy_blocks(ours)
    tokens, pos = random_tokens(4, 21, 2) % 256, torch.tensor([20, 18, 20, 7])
    a, b = ours(tokens, positions=pos), ref(tokens, positions=pos)
    if not close:
        assert (a - b).abs().max() > 1e-3
        return
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    target = torch.tensor([3, 1, 4, 1])
    ga = torch.autograd.grad(nn.functional.cross_entropy(a, target), [ours.embed.weight, ours.layers[0].mixer.A_log,
                             ours.layers[1].mixer.in_proj.weight, ours.layers[0].mixer.conv_bias])
    gb = torch.autograd.grad(nn.functional.cross_entropy(b, target), [ref.embed.weight, ref.layers[0].block.mixer.A_log,
                             ref.layers[1].block.mixer.in_proj.weight, ref.layers[0].block.mixer.conv1d.bias])
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-3)
