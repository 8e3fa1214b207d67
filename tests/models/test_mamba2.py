"""Mamba-2: the mixer equals the paper's recurrence written plainly; recurrent == parallel across chunk
boundaries; the published block. (Conformance, state sites: test_zoo.py, test_states.py.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mecheval.models import ModelConfig
from mecheval.models.mixers import MIXERS

from .mixer_checks import assert_recurrent_equals_parallel, inputs, make_mixer


def paper_mamba2(m, u):
    """Sec. 3 of "Transformers are SSMs" with one group, from the mixer's weights: u [B, T, D] -> [B, T, D]."""
    Di, N, H, P = m.d_inner, m.N, m.H, m.P
    z, xbc, dt = m.in_proj(u).split([Di, Di + 2 * N, H], dim=-1)
    x, Bm, Cm = F.silu(m.conv(xbc)).split([Di, N, N], dim=-1)
    delta = F.softplus(dt + m.dt_bias)  # [B, T, H]
    a = torch.exp(-delta * torch.exp(m.A_log))
    x = x.unflatten(-1, (H, P))
    S, ys = torch.zeros(u.shape[0], H, P, N, dtype=u.dtype), []
    for t in range(u.shape[1]):
        S = a[:, t, :, None, None] * S + (delta[:, t, :, None] * x[:, t])[..., None] * Bm[:, t, None, None, :]
        ys.append(torch.einsum("bhpn,bn->bhp", S, Cm[:, t]))
    y = torch.stack(ys, 1) + m.D[:, None] * x
    return m.out_proj(F.rms_norm(y.flatten(-2) * F.silu(z), (Di,), m.norm.weight, m.norm.eps))


@pytest.mark.parametrize("T", [1, 9, 70])
def test_mixer_equals_the_paper_recurrence(T):
    m = make_mixer("mamba2", head_dim=8, seed=T).double()
    u = inputs(2, T, 16, T).double()
    with torch.no_grad():
        torch.testing.assert_close(m(u), paper_mamba2(m, u), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("conv", [0, 4])
@pytest.mark.parametrize("T", [1, 64, 65, 150])
def test_recurrent_equals_parallel_across_chunks(conv, T):
    assert_recurrent_equals_parallel(make_mixer("mamba2", conv=conv, max_len=150, head_dim=8), inputs(2, T, 16, T))


def test_published_block():
    spec = MIXERS["mamba2"]
    assert (spec.default_conv, spec.default_mlp, spec.default_norm) == (4, False, "rmsnorm")
    m = make_mixer("mamba2", d_model=64)
    assert (m.H, m.P, m.N) == (8, 16, 16) and m.conv.channels == 128 + 2 * 16  # the conv on [x; B; C]
    assert ModelConfig(vocab_size=10, preset="mamba2").d_conv == [4, 4]
    with pytest.raises(ValueError, match="head_dim"):
        make_mixer("mamba2", head_dim=7)
