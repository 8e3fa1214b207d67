"""GLA, RWKV-7 and DeltaProduct against flash-linear-attention's pure-PyTorch reference recurrences
(`fla.ops.*.naive`), an independent implementation: each mixer's core output equals fla's reference run on
the inputs the mixer gives its recurrence. Optional: skipped where `fla` does not import (the `fla` extra,
`pip install 'mecheval[fla]'`; importing `fla.ops` needs Triton, which its CPU extra installs for import only).
The papers' recurrences written plainly: test_modern_mixers.py."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from mecheval.models.sites import record

from .mixer_checks import inputs, make_mixer

with warnings.catch_warnings():  # "Triton is not supported on current platform, roll back to CPU."
    warnings.simplefilter("ignore")
    gla_naive = pytest.importorskip("fla.ops.gla.naive", reason="flash-linear-attention (fla) does not import")
    dplr_naive = pytest.importorskip("fla.ops.generalized_delta_rule.dplr.naive", reason="fla does not import")
    gdp_naive = pytest.importorskip("fla.ops.gated_delta_product.naive", reason="fla does not import")

B, T = 2, 21


def recorded(m, x):
    """The mixer's state value (the recurrence's inputs, `DPLRState`) and its core output o [B, T, H, d_v]."""
    sites = {"state": m.state, "core_out": m.core_out}
    with torch.no_grad(), record(sites) as seen:
        m(x)
    return seen["state"], seen["core_out"].unflatten(-1, (m.n_heads, m.d_v))


@pytest.mark.parametrize("conv", [0, 4])
def test_gla_equals_fla_naive_recurrent_gla(conv):
    """fla: h = h ⊙ exp(gk) + k v^T, o = (q K^{-1/2})^T h. Our q carries K^{-1/2} already (fla's default scale)."""
    m = make_mixer("gla", conv=conv, n_heads=2).double()
    state, core = recorded(m, inputs(B, T, 16, 0).double())
    ref, _ = gla_naive.naive_recurrent_gla(state.q * m.d_k**0.5, state.k, state.v, state.log_w)
    torch.testing.assert_close(core, ref, atol=1e-5, rtol=1e-4)  # fla computes in float32


@pytest.mark.parametrize("token_shift", [True, False])
def test_rwkv7_equals_fla_dplr_recurrence(token_shift):
    """fla's RWKV-7 layer calls its DPLR op with alpha = -κ̂, beta = κ̂ ⊙ a, gk = log w, scale 1: S = S ⊙ exp(gk)
    + k v^T + beta (alpha^T S), o = q^T S ([B, H, T, D] layout; its naive form scales q by K^{-1/2})."""
    m = make_mixer("rwkv7", n_heads=2, token_shift=token_shift).double()
    state, core = recorded(m, inputs(B, T, 16, 1).double())
    inputs_fla = (state.q * m.d_k**0.5, state.k, state.v, state.a, state.b, state.log_w)
    ref, _ = dplr_naive.dplr_recurrence(*(x.float().transpose(1, 2) for x in inputs_fla))  # float32 only
    torch.testing.assert_close(core, ref.transpose(1, 2).double(), atol=1e-5, rtol=1e-4)  # fla computes in float32


@pytest.mark.parametrize("gate", [False, True])
def test_deltaproduct_equals_fla_naive_gated_delta_product(gate):
    """fla: per token h = h exp(g), then n delta steps h += β_j k_j (v_j - h^T k_j)^T, o = h^T q (its keys
    [B, T n, H, K], token-major; q and k normalised by the caller, as fla's kernel with use_qk_l2norm_in_kernel)."""
    n, H, d = 3, 2, 8
    m = make_mixer("deltaproduct", n_heads=H, n_householder=n, gate=gate).double()
    x = inputs(B, T, 16, 2).double()
    state, core = recorded(m, x)
    with torch.no_grad():
        q, k, v = F.silu(m.conv(m.qkv(x))).split([16, n * 16, n * 16], dim=-1)
        q = F.normalize(q.unflatten(-1, (H, d)), dim=-1)
        k = F.normalize(k.unflatten(-1, (n, H, d)), dim=-1).flatten(1, 2)
        v = v.unflatten(-1, (n, H, d)).flatten(1, 2)
        beta = (2 * torch.sigmoid(m.b_proj(x))).unflatten(-1, (n, H)).flatten(1, 2)
        g = -m.A_log.exp() * F.softplus(m.a_proj(x) + m.dt_bias) if gate else None
        ref, _ = gdp_naive.naive_recurrent_gated_delta_product(q * d**-0.5, k, v, g, beta, d**-0.5, None,
                                                               num_householder=n)
    torch.testing.assert_close(core, ref, atol=1e-5, rtol=1e-4)  # fla computes in float32
