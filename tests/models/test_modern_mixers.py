"""GLA, RWKV-7 and DeltaProduct: each mixer's core (and RWKV-7's whole output) equals its paper's recurrence
written plainly here from the mixer's own weights, one token at a time; the step form equals the chunkwise form
across chunk boundaries; the defaults; and the relations the docstrings state (RWKV-7's token shift is a
two-tap conv; DeltaProduct with one step per token is DeltaNet). flash-linear-attention's references:
test_fla_reference.py. (Conv slot, causality, gradients, sites: test_zoo.py and check-mixer.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models import ModelConfig
from mecheval.models.conformance import Suite, run_check
from mecheval.models.mixers import MIXERS
from mecheval.models.shortconv import ShortConv
from mecheval.models.sites import attach

from .mixer_checks import assert_recurrent_equals_parallel, inputs, make_mixer

FAST = settings(max_examples=4, deadline=None)
MODERN = {  # name -> options that exercise several heads (and each variant)
    "gla": {"n_heads": 2},
    "rwkv7": {"n_heads": 2},
    "deltaproduct": {"n_heads": 2},
}


def core_of(m, x):
    """The mixer's `core_out` on x: [B, T, H d_v]."""
    seen = {}
    handle = m.core_out.register_forward_hook(lambda _m, _i, out: seen.setdefault("core", out))
    with torch.no_grad():
        y = m(x)
    handle.remove()
    return seen["core"], y


def test_defaults():
    """GLA and RWKV-7 without a short conv (their papers, fla's layers); DeltaProduct with fla's conv of 4."""
    defaults = {name: (MIXERS[name].default_conv, MIXERS[name].default_mlp, MIXERS[name].default_norm) for name in MODERN}
    assert defaults == {"gla": (0, True, "rmsnorm"), "rwkv7": (0, True, "rmsnorm"), "deltaproduct": (4, True, "rmsnorm")}
    assert ModelConfig(vocab_size=10, preset="deltaproduct").d_conv == [4, 4]
    gla, rwkv, dp = (make_mixer(name, d_model=64) for name in MODERN)
    assert (gla.n_heads, gla.d_k, gla.d_v) == (4, 8, 16)  # expand_k 0.5, expand_v 1
    assert (rwkv.n_heads, rwkv.d_k, rwkv.substeps) == (1, 64, 1) and rwkv.mu.shape == (6, 64)
    assert (dp.n_heads, dp.d_k, dp.substeps, dp.beta_max) == (1, 64, 2, 2.0) and dp.a_proj is None


@pytest.mark.parametrize("name,options", [*MODERN.items(), ("rwkv7", {"token_shift": False}),
                                          ("deltaproduct", {"gate": True, "n_householder": 3})])
@pytest.mark.parametrize("conv", [0, 4])
@FAST
@given(T=st.integers(1, 70), seed=st.integers(0, 999))
def test_recurrent_equals_parallel_across_chunks(name, options, conv, T, seed):
    m = make_mixer(name, conv=conv, max_len=80, seed=seed, **options)
    assert_recurrent_equals_parallel(m, inputs(2, T, 16, seed))


def test_gla_core_is_the_gated_recurrence():
    """S_t = diag(α_t) S_{t-1} + k_t v_t^T, α_t = σ(W_α2 W_α1 u_t + b)^{1/16}, o_t = S_t^T q_t / √d_k."""
    m = make_mixer("gla", n_heads=2)
    x = inputs(2, 13, 16, 0)
    core, _ = core_of(m, x)
    with torch.no_grad():
        q, k, v = (z.unflatten(-1, (2, -1)) for z in m.qkv(x).split([8, 8, 16], dim=-1))
        alpha = torch.sigmoid(m.gate(x)).pow(1 / 16).unflatten(-1, (2, 4))
        S, outs = torch.zeros(2, 2, 4, 8), []
        for t in range(13):
            S = alpha[:, t, :, :, None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
            outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]) / 2)
    torch.testing.assert_close(core, torch.stack(outs, 1).flatten(-2), atol=1e-5, rtol=1e-5)


def test_rwkv7_is_the_generalised_delta_rule_in_the_papers_orientation():
    """Token shift, then S_t = S_{t-1} (diag(w_t) - κ̂_t^T (a_t ⊙ κ̂_t)) + v_t^T k̃_t with S [d_v, d_k],
    o_t = S_t r_t, y = W_o ((GroupNorm(o) + (r ⊙ ρ ⊙ k̃)·1 v) ⊙ g): the whole mixer, token by token."""
    m = make_mixer("rwkv7", n_heads=2)
    torch.nn.init.normal_(m.bonus)  # ρ, ξ, α away from their constant init
    torch.nn.init.normal_(m.removal)
    torch.nn.init.normal_(m.replacement)
    x = inputs(2, 11, 16, 1)
    core, y = core_of(m, x)
    H, d = 2, 8
    with torch.no_grad():
        W_r, W_k, W_v = m.r_proj.weight, m.k_proj.weight, m.v_proj.weight
        S = torch.zeros(2, H, d, d)  # [B, H, d_v, d_k]
        prev, cores, ys = torch.zeros(2, 16), [], []
        for t in range(11):
            u = x[:, t]
            mix = {n: u + (prev - u) * mu for n, mu in zip("rwkvag", m.mu)}
            heads = lambda z: z.view(2, H, d)  # noqa: E731
            r, k, v = heads(mix["r"] @ W_r.T), heads(mix["k"] @ W_k.T), heads(mix["v"] @ W_v.T)
            w = heads(torch.exp(-torch.exp(torch.tensor(-0.5)) * torch.sigmoid(m.decay(mix["w"]))))
            a = heads(torch.sigmoid(m.icl_rate(mix["a"])))
            kappa = F.normalize(k * heads(m.removal.expand(2, 16)), dim=-1)
            k_new = k * (1 + (a - 1) * heads(m.replacement.expand(2, 16)))
            transition = torch.diag_embed(w) - kappa[..., :, None] * (a * kappa)[..., None, :]  # [B, H, d_k, d_k]
            S = S @ transition + v[..., :, None] * k_new[..., None, :]
            o = (S @ r[..., None])[..., 0]  # [B, H, d_v]
            p = F.group_norm(o.reshape(2, 16), H, m.g_norm.weight, m.g_norm.bias, m.g_norm.eps).view(2, H, d)
            p = p + (r * m.bonus * k_new).sum(-1, keepdim=True) * v
            cores.append(o.flatten(-2))
            ys.append(m.o_proj(p.flatten(-2) * m.gate(mix["g"])))
            prev = u
    torch.testing.assert_close(core, torch.stack(cores, 1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, torch.stack(ys, 1), atol=1e-5, rtol=1e-5)


def test_rwkv7_token_shift_is_a_two_tap_conv_with_taps_summing_to_one():
    """x^□_t = (1 - μ) u_t + μ u_{t-1}: the ShortConv of kernel 2 with taps (μ, 1 - μ), before each projection;
    `token_shift: false` removes it and its parameters."""
    m = make_mixer("rwkv7")
    x = inputs(2, 9, 16, 2)
    conv = ShortConv(16, 2)
    W_r = m.r_proj.weight
    with torch.no_grad():
        conv.weight.copy_(torch.stack([m.mu[0], 1 - m.mu[0]], -1)[:, None])  # lag 1: μ_r, lag 0: 1 - μ_r
        expect = conv(x) @ W_r.T
        got = m._project(x, F.pad(x, (0, 0, 1, -1)) - x)[..., :16]  # δ = u_{t-1} - u_t
    torch.testing.assert_close(got, expect, atol=1e-5, rtol=1e-5)
    plain = make_mixer("rwkv7", token_shift=False)
    assert plain.mu is None and sum(p.numel() for p in m.parameters()) - sum(p.numel() for p in plain.parameters()) == 6 * 16


def test_zeroing_rwkv7_s_two_token_site_removes_its_token_shift():
    """The site `two_token` carries the shift's difference δ_t = u_{t-1} - u_t [B, T, D]; zeroing it gives the
    mixer with μ = 0 (x^□ = u: no token shift), what `interventions.two_token` ablates."""
    m = make_mixer("rwkv7", n_heads=2).double()
    m.two_token.name = "two_token"
    x = inputs(2, 9, 16, 2).double()
    seen = {}
    with torch.no_grad():
        with attach({"two_token": m.two_token}, {"two_token": lambda d: seen.setdefault("d", d)}):
            y = m(x)
        with attach({"two_token": m.two_token}, {"two_token": torch.zeros_like}):
            ablated = m(x)
        m.mu.zero_()
        unshifted = m(x)
    torch.testing.assert_close(seen["d"], F.pad(x, (0, 0, 1, -1)) - x, atol=0, rtol=0)
    torch.testing.assert_close(ablated, unshifted, atol=1e-12, rtol=0)
    assert (y - ablated).abs().max() > 1e-3  # the shift mattered


@pytest.mark.parametrize("gate", [False, True])
def test_deltaproduct_core_is_n_householder_steps_per_token(gate):
    """S_{t,0} = α_t S_{t-1}; S_{t,j} = (I - β_{t,j} k_{t,j} k_{t,j}^T) S_{t,j-1} + β_{t,j} k_{t,j} v_{t,j}^T;
    o_t = S_{t,n}^T q_t, from q, k_j, v_j = SiLU(conv(W u)), L2-normalised q / √d and k_j, β = 2 σ(W_β u)."""
    n, H, d, T = 3, 2, 8, 10
    m = make_mixer("deltaproduct", n_heads=H, n_householder=n, gate=gate)
    x = inputs(2, T, 16, 3)
    core, _ = core_of(m, x)
    with torch.no_grad():
        q, k, v = F.silu(m.conv(m.qkv(x))).split([16, n * 16, n * 16], dim=-1)
        q = F.normalize(q.unflatten(-1, (H, d)), dim=-1) / d**0.5
        k = F.normalize(k.unflatten(-1, (n, H, d)), dim=-1)
        v = v.unflatten(-1, (n, H, d))
        beta = 2 * torch.sigmoid(m.b_proj(x)).unflatten(-1, (n, H))
        alpha = torch.exp(-m.A_log.exp() * F.softplus(m.a_proj(x) + m.dt_bias)) if gate else torch.ones(2, T, H)
        S, outs = torch.zeros(2, H, d, d), []
        eye = torch.eye(d)
        for t in range(T):
            S = alpha[:, t, :, None, None] * S
            for j in range(n):
                kj, bj = k[:, t, j], beta[:, t, j, :, None, None]
                S = (eye - bj * kj[..., :, None] * kj[..., None, :]) @ S + bj * kj[..., :, None] * v[:, t, j, :, None, :]
            outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    torch.testing.assert_close(core, torch.stack(outs, 1).flatten(-2), atol=1e-5, rtol=1e-5)


def test_deltaproducts_reflection_site_carries_beta_above_one_and_zeroing_it_clamps_beta_at_one():
    """The site `reflection` carries max(β - 1, 0) [B, T, n H]; the mixer's output is unchanged by passing it, and
    zeroing it is the mixer with β <- min(β, 1) = 2 σ(min(W_β u, 0)) (its negative eigenvalues taken away)."""
    m = make_mixer("deltaproduct", n_heads=2, n_householder=2)
    x = inputs(2, 12, 16, 5)
    seen = {}
    with torch.no_grad(), attach({"r": m.reflection}, {"r": lambda r: seen.setdefault("r", r)}):
        y = m(x)
    beta = 2 * torch.sigmoid(m.b_proj(x)).detach()
    torch.testing.assert_close(seen["r"], (beta - 1).clamp(min=0), atol=0, rtol=0)
    assert (seen["r"] > 0).any() and (seen["r"] == 0).any()  # this draw has both kinds of step
    with torch.no_grad(), attach({"r": m.reflection}, {"r": torch.zeros_like}):
        ablated = m(x)
    logits = m.b_proj.forward
    m.b_proj.forward = lambda u: logits(u).clamp(max=0)  # 2 σ(z) <= 1 where z <= 0
    with torch.no_grad():
        clamped = m(x)
    torch.testing.assert_close(ablated, clamped, atol=1e-6, rtol=1e-6)
    assert (y - ablated).abs().max() > 1e-4  # the reflections mattered
    assert not hasattr(make_mixer("deltaproduct", allow_neg_eigval=False), "reflection")  # β < 1: no such part


def test_deltaproduct_with_one_step_and_beta_below_one_has_deltanets_core():
    dp = make_mixer("deltaproduct", n_heads=2, n_householder=1, allow_neg_eigval=False)
    net = make_mixer("deltanet", n_heads=2)
    with torch.no_grad():
        for name in ("qkv.weight", "b_proj.weight", "conv.weight"):
            net.get_parameter(name).copy_(dp.get_parameter(name))
    x = inputs(2, 40, 16, 4)
    torch.testing.assert_close(core_of(dp, x)[0], core_of(net, x)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODERN)
def test_learns_a_tiny_ar_batch(name):
    """check-mixer's `learns`: a 2-layer LM fits 32 examples of 2-pair AR (measured: DeltaProduct 0.5 s, GLA 8 s,
    RWKV-7 19 s on a shared CPU)."""
    check = run_check("learns", Suite(name, MIXERS[name], {}, 0).learns)
    assert check.status == "pass", check.reason
