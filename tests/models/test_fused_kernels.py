"""The fused CPU selective scan equals the per-step reference; the dispatcher picks and switches paths."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mecheval.models.ops import dispatch
from mecheval.models.ops.selective_scan import selective_scan_loop
from mecheval.models.ops.selective_scan_fused import selective_scan_fused
from mecheval.models.sites import attach, record

from .conftest import build, make_config, random_tokens

FAST = settings(max_examples=12, deadline=None)


def scan_inputs(B, T, Di, N, seed, dtype=torch.float32):
    """u, Δ > 0, A < 0, B, C, D as a Mamba layer produces them, all requiring grad."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    xs = (r(B, T, Di), F.softplus(r(B, T, Di) - 1), -torch.exp(r(Di, N)), r(B, T, N), r(B, T, N), r(Di))
    return [x.requires_grad_() for x in xs]


def assert_rel_close(actual, expected, rtol=1e-5, name=""):
    """Elementwise within rtol, plus rtol of the tensor's scale for entries near zero."""
    atol = rtol * expected.abs().max().item()
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


@FAST
@given(
    B=st.integers(1, 3), T=st.integers(1, 40), Di=st.integers(1, 40), N=st.integers(1, 17), seed=st.integers(0, 2**16)
)
@example(B=2, T=33, Di=37, N=16, seed=0)  # lanes past the channels (W = 48), 2 time chunks
@example(B=1, T=5, Di=150, N=3, seed=1)  # 2 channel blocks of W = 80, the last partial
def test_fused_equals_loop_outputs_and_gradients(B, T, Di, N, seed):
    xs = scan_inputs(B, T, Di, N, seed)
    y_ref, y = selective_scan_loop(*xs), selective_scan_fused(*xs)
    assert_rel_close(y, y_ref)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed + 1))
    grads, grads_ref = torch.autograd.grad(y, xs, gy), torch.autograd.grad(y_ref, xs, gy)
    for name, g, g_ref in zip("u delta A Bm Cm D".split(), grads, grads_ref):
        assert_rel_close(g, g_ref, name=name)


def test_backward_split_over_channel_groups(monkeypatch):
    """With more threads than batch rows, channel blocks are split into groups whose ∂B, ∂C partials are summed."""
    from mecheval.models.ops import selective_scan_fused as fused

    monkeypatch.setattr(fused.numba, "get_num_threads", lambda: 8)  # B=1, 40 channels -> 3 groups of one block
    monkeypatch.setattr(fused, "MAX_LANES", 16)  # blocks of W = 16
    xs = scan_inputs(1, 11, 40, 3, seed=7)
    gy = torch.randn(1, 11, 40, generator=torch.Generator().manual_seed(8))
    grads = torch.autograd.grad(selective_scan_fused(*xs), xs, gy)
    grads_ref = torch.autograd.grad(selective_scan_loop(*xs), xs, gy)
    for name, g, g_ref in zip("u delta A Bm Cm D".split(), grads, grads_ref):
        assert_rel_close(g, g_ref, name=name)


@given(Di=st.integers(1, 2000))
def test_lanes_cover_the_channels_in_even_vector_blocks(Di):
    from mecheval.models.ops.selective_scan_fused import MAX_LANES, lanes

    W, nblk = lanes(Di), -(-Di // MAX_LANES)
    assert W % 16 == 0 and W <= MAX_LANES
    assert -(-Di // W) == nblk  # as few blocks as MAX_LANES allows
    assert W - 16 < -(-Di // nblk)  # and no wider than the even split needs


def _scan_in_child(queue):
    queue.put(selective_scan_fused(*scan_inputs(2, 5, 20, 3, seed=9)).sum().item())


def test_fused_runs_in_a_process_forked_after_use():
    """Sweeps and data loaders fork; the kernel's thread pool must survive that."""
    import multiprocessing

    expected = selective_scan_fused(*scan_inputs(2, 5, 20, 3, seed=9)).sum().item()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_scan_in_child, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert queue.get(timeout=1) == pytest.approx(expected, rel=1e-6)  # the child may use other threads


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 5, 3, 4), (1, 9, 2, 3)])
def test_gradcheck_float64(shape):
    xs = scan_inputs(*shape, seed=sum(shape), dtype=torch.float64)
    assert torch.autograd.gradcheck(selective_scan_fused, xs)


def test_fused_handles_strided_inputs_and_keeps_dtype():
    u, delta, A, Bm, Cm, D = scan_inputs(2, 7, 4, 3, seed=1)
    BC = torch.cat([Bm, Cm], dim=-1)  # B, C as non-contiguous slices, as a mixer's x_proj gives them
    args = (u.mT.contiguous().mT, delta, A, BC[..., :3], BC[..., 3:], D)
    y = selective_scan_fused(*args)
    assert y.dtype == torch.float32 and y.shape == (2, 7, 4)
    assert_rel_close(y, selective_scan_loop(*args))


def test_float32_exp_is_accurate():
    """The vectorised float32 exp inside the kernel, seen through a 2-step, 1-state scan; NaN stays NaN."""
    x = torch.cat([torch.linspace(-80, 80, 4001), torch.tensor([float("nan")])])
    ones = torch.ones(1, x.numel(), 1)
    # h_0 = Δ u_0 B = 1, h_1 = exp(Δ A) h_0 (u_1 = 0), C = 1, D = 0: y_1 / y_0 = exp(A)
    u = torch.stack([ones[:, :, 0], torch.zeros(1, x.numel())], dim=1)  # [1, 2, Di]
    delta = torch.ones(1, 2, x.numel())
    A = x[:, None]
    y = selective_scan_fused(u, delta, A, torch.ones(1, 2, 1), torch.ones(1, 2, 1), torch.zeros(x.numel()))
    torch.testing.assert_close(y[0, 1] / y[0, 0], torch.exp(x.double()).float(), rtol=3e-7, atol=0, equal_nan=True)


def test_dispatch_selects_fused_on_cpu_and_reference_when_asked(monkeypatch):
    xs = scan_inputs(2, 6, 3, 4, seed=3)
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    assert dispatch.selective_scan(*xs).grad_fn.name() == "SelectiveScanFnBackward"
    monkeypatch.setenv(dispatch.ENV_VAR, "reference")
    y_ref = dispatch.selective_scan(*xs)
    assert "SelectiveScanFn" not in y_ref.grad_fn.name()
    with dispatch.kernel_mode("auto"):  # the context manager wins over the environment
        y = dispatch.selective_scan(*xs)
        assert y.grad_fn.name() == "SelectiveScanFnBackward"
    assert_rel_close(y, y_ref)
    monkeypatch.setenv(dispatch.ENV_VAR, "fast")
    with pytest.raises(ValueError, match="MECHEVAL_KERNELS"):
        dispatch.selective_scan(*xs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dispatch_never_forces_a_dtype(dtype):
    xs = [x.detach().to(dtype) for x in scan_inputs(1, 4, 2, 3, seed=4)]
    assert dispatch.selective_scan(*xs).dtype == dtype


def test_mamba_lm_and_its_sites_agree_on_both_paths():
    """Same logits and the same conv_out / core_out on the fused and the reference path; patching
    core_out on the fused path changes the logits as on the reference path."""
    lm = build(make_config("mamba", 4, d_model=16))
    tokens = random_tokens(3, 20, seed=5)
    names = [n for n in lm.sites() if n.endswith(("conv_out", "core_out"))]
    assert len(names) == 4
    zero_core = {"layers.1.core_out": torch.zeros_like}
    out = {}
    for mode in ("auto", "reference"):
        with dispatch.kernel_mode(mode), torch.no_grad():
            with record(lm.sites(), names) as acts:
                logits = lm(tokens)
            with attach(lm.sites(), zero_core):
                patched = lm(tokens)
        out[mode] = logits, acts, patched
    (logits, acts, patched), (logits_ref, acts_ref, patched_ref) = out["auto"], out["reference"]
    assert_rel_close(logits, logits_ref, rtol=1e-4)
    assert_rel_close(patched, patched_ref, rtol=1e-4)
    assert not torch.allclose(patched, logits)
    for n in names:
        assert_rel_close(acts[n], acts_ref[n], rtol=1e-4)
