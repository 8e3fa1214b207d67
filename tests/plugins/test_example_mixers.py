"""The mixers of examples/mixers/, loaded through the plug-in path: each passes check-mixer; sliding-window
attention's math is checked against attention; Mamba-2 and Gated DeltaNet are the zoo's (their own tests:
tests/models/test_mamba2.py, test_gated_deltanet.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mecheval.models.conformance import Suite, check_mixer, run_check
from mecheval.models.mixers import MIXERS, mixer_label, mixer_spec

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


@pytest.mark.parametrize("path,zoo", [("examples.mixers.mamba2:Mamba2", "mamba2"),
                                      ("examples.mixers.gated_deltanet:GatedDeltaNet", "gated-deltanet")])
def test_promoted_examples_load_the_zoo_mixer(path, zoo):
    """Mamba-2 and Gated DeltaNet moved to the zoo: their example paths load the same mixer with the same
    defaults and report label, so configs and results that name the paths still mean it."""
    assert mixer_spec(path) == MIXERS[zoo]
    assert mixer_label(path) == zoo
