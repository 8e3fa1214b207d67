"""Mamba-3 (SISO): the reference recurrence's equations (state-spaces/mamba, `Mamba3Simple._recurrence`,
written out here plainly) equal the mixer; recurrent == parallel across chunk boundaries; the two-token
term is what the site `two_token` ablates; no short conv by default (the slot an ablation).
(Conformance, state sites: test_zoo.py, test_states.py, test_mixer_properties.py.)"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mecheval.models import ModelConfig, attach, build_model
from mecheval.models.mixers import MIXERS
from mecheval.models.mixers.mamba3 import rotate

from .mixer_checks import assert_recurrent_equals_parallel, enlarged, inputs, make_mixer

OPTIONS = {"d_state": 8, "head_dim": 8}  # 4 heads at width 16


def reference_mamba3(m, u, two_token: bool = True, rotary: bool = True):
    """`Mamba3Simple.forward` with its step-by-step `_recurrence` (SISO, one group, no initial state), written
    from its equations with this mixer's weights: u [B, T, D] -> [B, T, D]. The one intended difference, the
    rotary angle φ_t = Σ_{s<=t} Δ_s θ_s (Mamba3Simple: Σ θ_s), is marked below. `two_token=False` drops
    β_t x_{t-1} B_{t-1}^T, `rotary=False` the rotation of B and C (φ_t = 0)."""
    Di, N, H, P = m.d_inner, m.N, m.H, m.P
    z, x, Bm, Cm, dt, theta, lam = m.in_proj(u).split([Di, Di, N, N, H, H * N // 2, H], dim=-1)
    A = -torch.exp(m.A_log)  # [H]
    dt = F.softplus(dt + m.dt_bias)  # [B, T, H]
    Bm = F.rms_norm(Bm, (N,), m.B_norm.weight, 1e-5)[:, :, None, :] + m.B_bias  # [B, T, H, N]
    Cm = F.rms_norm(Cm, (N,), m.C_norm.weight, 1e-5)[:, :, None, :] + m.C_bias
    angle = torch.cumsum(dt[..., None] * theta.unflatten(-1, (H, N // 2)), dim=1)  # intended: Δ_t θ_t
    angle = angle if rotary else torch.zeros_like(angle)
    cos, sin = torch.cos(angle), torch.sin(angle)

    def apply_rotary_emb(v):  # the pairs (v_n, v_{n + N/2})
        v1, v2 = v[..., : N // 2], v[..., N // 2 :]
        return torch.cat([v1 * cos - v2 * sin, v1 * sin + v2 * cos], dim=-1)

    Bm, Cm = apply_rotary_emb(Bm), apply_rotary_emb(Cm)
    lam = torch.sigmoid(lam)
    x = x.unflatten(-1, (H, P))
    alpha = torch.exp(dt * A)  # [B, T, H]
    gamma = lam * dt
    beta = (1 - lam) * dt * torch.exp(dt * A)
    h = torch.zeros(u.shape[0], H, P, N, dtype=u.dtype)
    prev_Bx, ys = None, []
    for t in range(u.shape[1]):
        Bx_t = torch.einsum("bhp,bhn->bhpn", x[:, t], Bm[:, t])
        h = alpha[:, t, :, None, None] * h + gamma[:, t, :, None, None] * Bx_t
        if prev_Bx is not None and two_token:
            h = h + beta[:, t, :, None, None] * prev_Bx
        prev_Bx = Bx_t
        ys.append(torch.einsum("bhpn,bhn->bhp", h, Cm[:, t]))
    y = torch.stack(ys, dim=1) + x * m.D[:, None]  # the D skip
    y = y.flatten(-2)
    y = F.rms_norm(y * F.silu(z), (Di,), m.norm.weight, m.norm.eps)  # RMSNormGated, norm_before_gate=False
    return m.out_proj(y)


def trained_like(seed: int = 0):
    return enlarged(make_mixer("mamba3", seed=seed, **OPTIONS))


@pytest.mark.parametrize("T", [1, 9, 70])
def test_mixer_equals_the_reference_recurrence(T):
    m = trained_like(T)
    u = inputs(2, T, 16, T).double()
    with torch.no_grad():
        torch.testing.assert_close(m(u), reference_mamba3(m, u), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("conv", [0, 4])
@pytest.mark.parametrize("T", [1, 5, 64, 65, 150])
def test_recurrent_equals_parallel_across_chunks(conv, T):
    assert_recurrent_equals_parallel(make_mixer("mamba3", conv=conv, max_len=150, **OPTIONS), inputs(2, T, 16, T))


@pytest.mark.parametrize("site", ["two_token", "rotary"])
def test_zeroing_a_term_s_site_is_the_reference_recurrence_without_it(site):
    """The ablations through the sites (`interventions.terms`): zeroing `two_token` (β_t x_{t-1}) drops the term
    β_t x_{t-1} B_{t-1}^T, zeroing `rotary` (the angle steps Δ_t θ_t) the rotation of B and C: the mixer then is
    the reference recurrence without it, and the term matters (the output moves)."""
    m = trained_like(1)
    u = inputs(2, 12, 16, 2).double()
    getattr(m, site).name = site
    with torch.no_grad(), attach({site: getattr(m, site)}, {site: torch.zeros_like}):
        ablated = m(u)
    with torch.no_grad():
        torch.testing.assert_close(ablated, reference_mamba3(m, u, **{site: False}), atol=1e-10, rtol=1e-10)
        assert (ablated - m(u))[:, 1:].abs().amax(-1).min() > 1e-3  # every position after the first


def test_the_two_token_site_of_an_lm_carries_beta_times_the_previous_input():
    lm = build_model(ModelConfig(preset="mamba3", vocab_size=8, d_model=16, n_layers=2, max_len=16, options={"mamba3": OPTIONS}))
    assert lm.cfg.d_conv == [0, 0] and "layers.0.conv_out" not in lm.sites()
    tokens = torch.randint(0, 8, (2, 10), generator=torch.Generator().manual_seed(0))
    seen = {}
    with torch.no_grad(), attach(lm.sites(), {"layers.1.two_token": lambda v: seen.setdefault("v", v),
                                              "layers.1.rotary": lambda v: seen.setdefault("angles", v)}):
        lm(tokens)
    assert seen["v"].shape == (2, 10, 32) and torch.equal(seen["v"][:, 0], torch.zeros(2, 32))  # no token before 0
    assert seen["angles"].shape == (2, 10, lm.layers[1].mixer.H * lm.layers[1].mixer.N // 2)  # Δ_t θ_t per head


def test_rotation_is_relative_and_preserves_norms():
    """R(φ) is orthogonal: (R(φ) C) · (R(φ) B) = C · B, so C_t · B_s sees only the angle between t and s."""
    g = torch.Generator().manual_seed(0)
    b, c, phi = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g), torch.randn(5, 4, generator=g)
    torch.testing.assert_close((rotate(c, phi) * rotate(b, phi)).sum(-1), (c * b).sum(-1))
    torch.testing.assert_close(rotate(b, phi).norm(dim=-1), b.norm(dim=-1))
    torch.testing.assert_close(rotate(b, torch.full((5, 4), math.pi / 2))[:, :4], -b[:, 4:])


def test_defaults_and_options():
    spec = MIXERS["mamba3"]
    assert (spec.default_conv, spec.default_mlp, spec.default_norm, spec.has_conv) == (0, False, "rmsnorm", True)
    m = make_mixer("mamba3", d_model=64)
    assert (m.H, m.P, m.N) == (8, 16, 16) and m.conv is None
    assert torch.equal(m.B_bias, torch.ones(8, 16)) and torch.equal(m.C_bias, torch.ones(8, 16))
    with pytest.raises(ValueError, match="must be even"):
        make_mixer("mamba3", d_state=5)
    with pytest.raises(ValueError, match="head_dim"):
        make_mixer("mamba3", head_dim=7)


ABLATIONS = [{"two_token": False}, {"rotary": False}, {"two_token": False, "rotary": False}]


@pytest.mark.parametrize("conv", [0, 4])
@pytest.mark.parametrize("ablated", ABLATIONS, ids=lambda a: "+".join(a))
def test_trained_without_a_term_it_is_the_recurrence_without_it(conv, ablated):
    """The training ablations (`two_token: false`: without β_t x_{t-1} B_{t-1}^T; `rotary: false`: without the
    rotation of B and C): the mixer is the reference recurrence without them, differs from the same weights with
    them, and its recurrent form equals its parallel one."""
    m = enlarged(make_mixer("mamba3", seed=3, **ablated, **OPTIONS))
    kept = enlarged(make_mixer("mamba3", seed=3, **OPTIONS))
    u = inputs(2, 12, 16, 3).double()
    with torch.no_grad():
        torch.testing.assert_close(m(u), reference_mamba3(m, u, **ablated), atol=1e-10, rtol=1e-10)
        assert (m(u) - kept(u)).abs().amax() > 1e-3  # the same weights with the term differ
    assert_recurrent_equals_parallel(make_mixer("mamba3", conv=conv, max_len=40, **ablated, **OPTIONS), inputs(2, 33, 16, 4))
