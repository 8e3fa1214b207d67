"""Gated DeltaNet: the core equals the paper's gated delta rule written plainly and, where flash-linear-attention
is installed, its naive reference op; recurrent == parallel across chunk boundaries; α = 1 is DeltaNet.
(Conformance, state sites: test_zoo.py, test_states.py.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from mecheval.models.mixers import MIXERS
from mecheval.models.ops.delta_rule import delta_rule
from mecheval.models.sites import record

from .mixer_checks import assert_recurrent_equals_parallel, enlarged, inputs, make_mixer


def core_inputs(m, u):
    """The gated delta rule's inputs of mixer m on u: q, k, v [B, T, H, d_h], β, g = log α [B, T, H]."""
    c = m.qkv(u)
    return m._heads(c if m.conv is None else m.conv(c), u)


def paper_gated_delta_rule(q, k, v, beta, g):
    """Eq. 10 of "Gated Delta Networks" in the paper's layout, S_t [d_v, d_k]:
    S_t = S_{t-1} (α_t (I − β_t k_t k_t^T)) + β_t v_t k_t^T,  o_t = S_t q_t  -> o [B, T, H, d_v]."""
    Bsz, T, H, dk = k.shape
    eye = torch.eye(dk, dtype=k.dtype)
    S, outs = torch.zeros(Bsz, H, v.shape[-1], dk, dtype=k.dtype), []
    for t in range(T):
        kt, vt, bt, at = k[:, t], v[:, t], beta[:, t, :, None, None], g[:, t].exp()[..., None, None]
        S = S @ (at * (eye - bt * kt[..., :, None] * kt[..., None, :])) + bt * vt[..., :, None] * kt[..., None, :]
        outs.append((S @ q[:, t, ..., None]).squeeze(-1))
    return torch.stack(outs, dim=1)


def fla_naive_recurrence():
    """flash-linear-attention's `naive_recurrent_gated_delta_rule`, loaded from its file (fla's package imports
    Triton; its naive op is plain PyTorch + einops)."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("flash-linear-attention is not installed (`pip install fla-core==0.5.2`: pure Python + einops)")
    pytest.importorskip("einops", reason="fla's naive op imports einops")
    path = Path(list(spec.submodule_search_locations)[0]) / "ops" / "gated_delta_rule" / "naive.py"
    if not path.exists():
        pytest.skip(f"this flash-linear-attention has no {path.name} for the gated delta rule")
    module_spec = importlib.util.spec_from_file_location("fla_gated_delta_rule_naive", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.naive_recurrent_gated_delta_rule


def trained_like(seed: int, **options):
    return enlarged(make_mixer("gated-deltanet", seed=seed, **options))


@pytest.mark.parametrize("T", [1, 9, 70])
def test_core_equals_the_paper_s_gated_delta_rule(T):
    m = trained_like(T, n_heads=2)
    u = inputs(2, T, 16, T).double()
    with torch.no_grad(), record({"core_out": m.core_out}) as seen:
        m(u)
        expect = paper_gated_delta_rule(*core_inputs(m, u))
    torch.testing.assert_close(seen["core_out"], expect.flatten(-2), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("T", [9, 70])
def test_chunkwise_form_equals_flash_linear_attention_s_naive_recurrence(T):
    naive = fla_naive_recurrence()
    m = trained_like(T, n_heads=2)
    with torch.no_grad():
        q, k, v, beta, g = core_inputs(m, inputs(2, T, 16, T).double())
        theirs, _ = naive(q, k, v, beta, g, scale=1.0)  # q is already scaled by d_h^-1/2
        torch.testing.assert_close(delta_rule(q, k, v, beta, g, chunk_size=32), theirs.to(q.dtype), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("conv", [0, 4])
@pytest.mark.parametrize("n_heads", [1, 2])
@pytest.mark.parametrize("T", [1, 64, 65, 150])
def test_recurrent_equals_parallel_across_chunks(conv, n_heads, T):
    m = make_mixer("gated-deltanet", conv=conv, max_len=150, n_heads=n_heads)
    assert_recurrent_equals_parallel(m, inputs(2, T, 16, T))


def test_without_decay_the_core_is_the_zoo_deltanet():
    """α = 1 (A_log -> -inf) leaves the delta rule: the core equals the zoo's DeltaNet with the same weights."""
    gated = make_mixer("gated-deltanet", conv=4, n_heads=2)
    with torch.no_grad():
        gated.A_log.fill_(-1e4)
    plain = make_mixer("deltanet", conv=4, n_heads=2)
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if k in plain.state_dict()})
    x = inputs(2, 20, 16, 0)
    with torch.no_grad(), record({"g": gated.core_out, "p": plain.core_out}) as seen:
        gated(x), plain(x)
    torch.testing.assert_close(seen["g"], seen["p"], atol=1e-4, rtol=1e-4)


def test_defaults():
    spec = MIXERS["gated-deltanet"]
    assert (spec.default_conv, spec.default_mlp, spec.default_norm) == (4, True, "layernorm")
    m = make_mixer("gated-deltanet", d_model=64)
    assert (m.H, m.d_h) == (1, 64) and m.conv.channels == 3 * 64
    with pytest.raises(ValueError, match="n_heads"):
        make_mixer("gated-deltanet", n_heads=3)
