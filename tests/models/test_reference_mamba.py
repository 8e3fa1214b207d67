"""Our Mamba blocks equal the mambapy reference (alxndrTL/mamba.py) given the same weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from .conftest import build, make_config

mambapy = pytest.importorskip("mambapy.mamba")


@pytest.mark.parametrize("d_conv,conv_bias", [(2, False), (4, False), (4, True)])
def test_mamba_blocks_equal_mambapy_with_copied_weights(d_conv, conv_bias):
    lm = build(make_config("mamba", d_conv, d_model=32, options={"mamba": {"conv_bias": conv_bias}}))
    ref = mambapy.Mamba(mambapy.MambaConfig(d_model=32, n_layers=2, d_state=16, d_conv=d_conv, expand_factor=2))
    with torch.no_grad():
        for ours, theirs in zip(lm.layers, ref.layers):
            m, r = ours.mixer, theirs.mixer
            for name in ("in_proj", "x_proj", "dt_proj", "out_proj"):
                getattr(r, name).load_state_dict(getattr(m, name).state_dict())
            r.conv1d.weight.copy_(m.conv.weight)
            r.conv1d.bias.copy_(m.conv_bias if conv_bias else torch.zeros_like(r.conv1d.bias))
            r.A_log.copy_(m.A_log)
            r.D.copy_(m.D)
            theirs.norm.weight.copy_(ours.norm1.weight)
        x = torch.randn(3, 37, 32, generator=torch.Generator().manual_seed(0))
        torch.testing.assert_close(nn.Sequential(*lm.layers)(x), ref(x), atol=1e-4, rtol=1e-4)
