"""The three modern mixers of examples/mixers/, built only through the plug-in path: each passes
check-mixer, and each one's math is checked against an independent form."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mecheval.models.conformance import Suite, check_mixer, run_check
from mecheval.models.mixers import MIXERS, mixer_spec
from mecheval.models.sites import record

ROOT = Path(__file__).parents[2]
EXAMPLES = {
    "examples.mixers.mamba2:Mamba2": {"head_dim": 8},  # 4 heads at check-mixer's width (multi-head state)
    "examples.mixers.gated_deltanet:GatedDeltaNet": {"n_heads": 2},
    "examples.mixers.sliding_window:SlidingWindowAttention": {"window": 5},  # < check-mixer's T = 24
}


@pytest.fixture(autouse=True)
def repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))


@pytest.mark.parametrize("path", EXAMPLES)
def test_passes_check_mixer(path):
    checks = check_mixer(path, learn=False, options=EXAMPLES[path])
    failed = [(c.name, c.reason) for c in checks if c.status == "fail"]
    assert not failed
    assert [c.name for c in checks if c.status == "skip"] == (
        ["conv slot", "learns"] if "sliding" in path else ["learns"])


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES)
def test_learns_a_tiny_ar_batch(path):
    check = run_check("learns", Suite(path, mixer_spec(path), {}, 0).learns)
    assert check.status == "pass", check.reason


def build(path: str, conv=0, d: int = 16, seed: int = 0, **options):
    spec = mixer_spec(path)
    torch.manual_seed(seed)
    return spec.cls(d, conv, spec.options(**options), 0, 64)


def test_sliding_window_is_attention_when_the_window_covers_the_context():
    x = torch.randn(2, 12, 16)
    swa = build("examples.mixers.sliding_window:SlidingWindowAttention", n_heads=2, window=12)
    full = MIXERS["attention"].cls(16, 0, MIXERS["attention"].options(n_heads=2), 0, 64)
    full.load_state_dict(swa.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(swa(x), full(x), atol=1e-5, rtol=1e-5)
        short = build("examples.mixers.sliding_window:SlidingWindowAttention", n_heads=2, window=4)
        short.load_state_dict(swa.state_dict())
        y = short(x)
        torch.testing.assert_close(y[:, :4], full(x)[:, :4], atol=1e-5, rtol=1e-5)  # the window holds everything yet
        assert (y[:, 4:] - full(x)[:, 4:]).abs().max() > 1e-3
        one = build("examples.mixers.sliding_window:SlidingWindowAttention", window=1)
        v = one.qkv(x).chunk(3, dim=-1)[2]
        torch.testing.assert_close(one(x), one.out(v), atol=1e-5, rtol=1e-5)  # window 1: each token its own value


def test_gated_deltanet_without_decay_is_the_zoo_deltanet():
    """α = 1 (A_log -> -inf) leaves the delta rule: the core equals the zoo's DeltaNet with the same weights."""
    gated = build("examples.mixers.gated_deltanet:GatedDeltaNet", conv=4, n_heads=2)
    with torch.no_grad():
        gated.A_log.fill_(-1e4)
    plain = MIXERS["deltanet"].cls(16, 4, MIXERS["deltanet"].options(n_heads=2), 0, 64)
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if k in plain.state_dict()})
    gated.core_out.name, plain.core_out.name = "g", "p"
    x = torch.randn(2, 20, 16)
    with torch.no_grad(), record({"g": gated.core_out}) as a, record({"p": plain.core_out}) as b:
        gated(x), plain(x)
    torch.testing.assert_close(a["g"], b["p"], atol=1e-4, rtol=1e-4)


def test_mamba2_has_a_decay_per_head_a_multi_head_state_and_without_decay_a_running_sum():
    m = build("examples.mixers.mamba2:Mamba2", conv=4, head_dim=8)
    assert m.A_log.shape == (4,) and m.init_state(3)[1].shape == (3, 4, 8, 16)  # [B, H, P, N]
    x = torch.randn(2, 10, 16)
    with torch.no_grad():
        m.A_log.fill_(-1e4)  # a_t = 1: no decay; the core is then a running sum, not a decaying one
        z, xbc, dt = m._split(x)
        xs, Bm, Cm, delta, _ = m._ssd_inputs(m.conv(xbc), dt)
        state = torch.zeros(2, 4, 8, 16)
        ys = []
        for t in range(10):
            state = state + (delta[:, t, :, None] * xs[:, t])[..., None] * Bm[:, t, None, None, :]
            ys.append(torch.einsum("bhpn,bn->bhp", state, Cm[:, t]) + m.D[:, None] * xs[:, t])
        m.core_out.name = "core"
        with record({"core": m.core_out}) as seen:
            m(x)
    torch.testing.assert_close(seen["core"], torch.stack(ys, 1).flatten(-2), atol=1e-4, rtol=1e-4)
