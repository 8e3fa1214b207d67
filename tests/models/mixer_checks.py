"""Property checks shared by the mixer tests (test_mixer_properties, test_mamba, test_deltanet, test_h3)."""

from __future__ import annotations

import torch
from torch import nn

from mecheval.models.mixers import MIXERS, Mixer
from mecheval.models.shortconv import ShortConv

# Options that keep the step-by-step checks fast: for H3 a small diagonal SSM.
FAST_OPTIONS = {"deltanet": {}, "mamba": {}, "h3": {"d_state": 16}}


def make_mixer(name: str, d_model: int = 16, conv=None, max_len: int = 64, seed: int = 0, **options) -> Mixer:
    spec = MIXERS[name]
    torch.manual_seed(seed)
    conv = spec.default_conv if conv is None else conv
    return spec.cls(d_model, conv, spec.options(**options), 0, max_len)


def enlarged(mixer: Mixer) -> Mixer:
    """The mixer in float64 with its weights moved by 0.3 N(0, 1): larger than at init, so that every term of
    its recurrence shows in the output."""
    mixer = mixer.double()
    with torch.no_grad():
        for p in mixer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return mixer


def inputs(B: int, T: int, D: int, seed: int) -> torch.Tensor:
    return torch.randn(B, T, D, generator=torch.Generator().manual_seed(seed))


def assert_recurrent_equals_parallel(mixer: Mixer, x: torch.Tensor) -> None:
    with torch.no_grad():
        torch.testing.assert_close(mixer.recurrent(x), mixer(x), atol=1e-4, rtol=1e-4)


def assert_causal(mixer: Mixer, x: torch.Tensor, t: int) -> None:
    """Changing inputs after t leaves outputs up to t unchanged, and does change output t + 1."""
    y = x.clone()
    y[:, t + 1 :] += 1.0 + torch.randn_like(y[:, t + 1 :])
    with torch.no_grad():
        a, b = mixer(x), mixer(y)
    torch.testing.assert_close(b[:, : t + 1], a[:, : t + 1], atol=1e-5, rtol=0)
    assert (a[:, t + 1] - b[:, t + 1]).abs().max() > 1e-4


def conv_params(mixer: nn.Module) -> int:
    return sum(p.numel() for m in mixer.modules() if isinstance(m, (ShortConv, nn.Conv1d)) for p in m.parameters())


def assert_conv_slot(name: str, **options) -> None:
    """d_conv 0: no conv module, no conv parameters, no conv_out site; d_conv k: exactly the k-tap weights."""
    m0 = make_mixer(name, conv=0, **options)
    assert m0.conv is None and conv_params(m0) == 0 and not hasattr(m0, "conv_out")
    for k in (1, 3):
        mk = make_mixer(name, conv=k, **options)
        assert mk.conv.kernel_size == k and hasattr(mk, "conv_out")
        n0 = sum(p.numel() for p in m0.parameters())
        assert sum(p.numel() for p in mk.parameters()) - n0 == conv_params(mk) == mk.conv.weight.numel()


def assert_every_parameter_gets_a_gradient(mixer: Mixer, x: torch.Tensor) -> None:
    x = x.clone().requires_grad_()
    mixer(x).square().mean().backward()
    for name, p in mixer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
