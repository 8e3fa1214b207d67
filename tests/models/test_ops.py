"""The recurrences behind Mamba, DeltaNet and H3: each parallel/chunked op equals its per-step loop; the chunk grid
the chunked ops share."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models.ops.chunks import chunk_grid, into_chunks
from mecheval.models.ops.delta_rule import delta_rule, delta_rule_loop
from mecheval.models.ops.diag_ssm import diag_ssm, diag_ssm_kernel, diag_ssm_loop
from mecheval.models.ops.selective_scan import linear_scan, selective_scan, selective_scan_loop
from mecheval.models.ops.ssd import ssd, ssd_loop

FAST = settings(max_examples=15, deadline=None)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@given(T=st.integers(1, 200), chunk=st.integers(1, 64))
@FAST
def test_the_chunk_grid_covers_the_sequence_with_the_fewest_padded_steps(T, chunk):
    nc, L = chunk_grid(T, chunk)
    assert L <= chunk and nc == -(-T // chunk)  # no chunk too long, no more chunks than needed
    assert 0 <= nc * L - T < nc  # fewer padded steps than chunks: the lengths as even as they can be
    z = torch.arange(2.0 * T * 3).view(2, T, 3)
    chunks = into_chunks(z, nc, L)
    assert chunks.shape == (2, nc, L, 3)
    flat = chunks.reshape(2, nc * L, 3)
    assert torch.equal(flat[:, :T], z) and not flat[:, T:].any()  # in order, zeros after


def grads(fn, args, seed: int):
    """Output and gradients of a random projection of fn(*args) w.r.t. every argument."""
    args = [a.detach().clone().requires_grad_() for a in args]
    y = fn(*args)
    (y * torch.randn(y.shape, generator=gen(seed))).sum().backward()
    return [y.detach()] + [a.grad for a in args]


# ------------------------------------------------------------------------------------ selective scan


def scan_inputs(B, T, Di, N, seed, delta_scale=1.0, a_scale=1.0):
    g = gen(seed)
    u = torch.randn(B, T, Di, generator=g)
    delta = delta_scale * F.softplus(torch.randn(B, T, Di, generator=g) - 1)
    A = -a_scale * torch.rand(Di, N, generator=g) * N
    Bm, Cm = torch.randn(B, T, N, generator=g), torch.randn(B, T, N, generator=g)
    return u, delta, A, Bm, Cm, torch.randn(Di, generator=g)


@FAST
@given(
    B=st.integers(1, 3), T=st.integers(1, 70), Di=st.integers(1, 6), N=st.integers(1, 5),
    chunk=st.sampled_from([1, 3, 8, 32]), seed=st.integers(0, 2**16),
)
def test_selective_scan_equals_loop_with_gradients(B, T, Di, N, chunk, seed):
    args = scan_inputs(B, T, Di, N, seed)
    fast = grads(lambda *a: selective_scan(*a, chunk_size=chunk), args, seed)
    ref = grads(selective_scan_loop, args, seed)
    for f, r, name in zip(fast, ref, ["y", "u", "delta", "A", "B", "C", "D"]):
        torch.testing.assert_close(f, r, atol=1e-4, rtol=1e-4, msg=name)


def test_selective_scan_is_stable_under_strong_decay():
    """Decays of e^-1000 per step (large Δ, large |A|) underflow to 0 in the chunked scan, never overflow."""
    args = scan_inputs(2, 50, 4, 3, 0, delta_scale=50.0, a_scale=10.0)
    y = selective_scan(*args, chunk_size=16)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, selective_scan_loop(*args), atol=1e-4, rtol=1e-4)


def test_linear_scan_is_the_first_order_recurrence():
    a, b = torch.rand(3, 7, 2, generator=gen(1)), torch.randn(3, 7, 2, generator=gen(2))
    h, expect = torch.zeros(3, 2), []
    for t in range(7):
        h = a[:, t] * h + b[:, t]
        expect.append(h)
    torch.testing.assert_close(linear_scan(a, b, dim=1), torch.stack(expect, 1))


# ---------------------------------------------------------------------------------------- delta rule


def delta_inputs(B, T, H, dk, dv, seed):
    g = gen(seed)
    q = torch.randn(B, T, H, dk, generator=g)
    k = F.normalize(torch.randn(B, T, H, dk, generator=g), dim=-1)
    return q, k, torch.randn(B, T, H, dv, generator=g), torch.rand(B, T, H, generator=g)


@FAST
@given(
    B=st.integers(1, 2), T=st.integers(1, 80), H=st.integers(1, 3), dk=st.integers(1, 6), dv=st.integers(1, 5),
    chunk=st.sampled_from([1, 4, 16, 64]), seed=st.integers(0, 2**16),
)
def test_chunkwise_delta_rule_equals_loop_with_gradients(B, T, H, dk, dv, chunk, seed):
    args = delta_inputs(B, T, H, dk, dv, seed)
    fast = grads(lambda *a: delta_rule(*a, chunk_size=chunk), args, seed)
    ref = grads(delta_rule_loop, args, seed)
    for f, r, name in zip(fast, ref, ["o", "q", "k", "v", "beta"]):
        torch.testing.assert_close(f, r, atol=1e-4, rtol=1e-4, msg=name)


def gates(B, T, H, seed, scale=1.0):
    """log α [B, T, H], <= 0."""
    return -scale * F.softplus(torch.randn(B, T, H, generator=gen(seed)) - 1)


@FAST
@given(
    B=st.integers(1, 2), T=st.integers(1, 80), H=st.integers(1, 3), dk=st.integers(1, 6), dv=st.integers(1, 5),
    chunk=st.sampled_from([1, 4, 16, 64]), seed=st.integers(0, 2**16),
)
def test_chunkwise_gated_delta_rule_equals_loop_with_gradients(B, T, H, dk, dv, chunk, seed):
    args = (*delta_inputs(B, T, H, dk, dv, seed), gates(B, T, H, seed + 1))
    fast = grads(lambda *a: delta_rule(*a, chunk_size=chunk), args, seed)
    ref = grads(delta_rule_loop, args, seed)
    for f, r, name in zip(fast, ref, ["o", "q", "k", "v", "beta", "g"]):
        torch.testing.assert_close(f, r, atol=1e-4, rtol=1e-4, msg=name)


def test_gated_delta_rule_is_stable_under_strong_decay():
    """Gates of e^-500 per step underflow to 0 in the chunkwise form, never overflow (exponents <= 0 only)."""
    args = (*delta_inputs(2, 40, 2, 4, 3, 0), gates(2, 40, 2, 1, scale=500.0))
    o = delta_rule(*args, chunk_size=16)
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o, delta_rule_loop(*args), atol=1e-5, rtol=1e-5)


def test_delta_rule_overwrites_the_value_of_a_repeated_key():
    """With β = 1 and orthonormal keys the state is a key -> value table; writing a key again replaces
    its value (linear attention would sum the two)."""

    def run(q, k, v, beta):  # one sequence, one head: [T, d] -> [T, d_v]
        q, k, v, beta = (x[None, :, None] for x in (q, k, v, beta))
        return delta_rule(q, k, v, beta, chunk_size=2)[0, :, 0]

    keys = torch.eye(4)[[0, 1, 2, 0, 0]]  # key 0 written at steps 0 and 3, then read at step 4
    values = torch.randn(5, 3, generator=gen(0))
    out = run(keys, keys, values, torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0]))  # step 4 (β = 0) only reads
    torch.testing.assert_close(out[:4], values[:4])  # each step reads back the value it just wrote
    torch.testing.assert_close(out[4], values[3])  # key 0 holds its last value


# -------------------------------------------------------------------------------------- diagonal SSM


def s4d_params(H, M, seed):
    g = gen(seed)
    dt = torch.exp(torch.rand(H, generator=g) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))[:, None]
    dtA = dt * torch.complex(-0.5 * torch.ones(H, M), math.pi * torch.arange(M).float().repeat(H, 1))
    C = torch.complex(torch.randn(H, M, generator=g), torch.randn(H, M, generator=g))
    return (1 + dtA / 2) / (1 - dtA / 2), dt / (1 - dtA / 2), C


@FAST
@given(
    B=st.integers(1, 2), T=st.integers(1, 64), H=st.integers(1, 3), M=st.sampled_from([1, 4, 64, 512]),
    E=st.sampled_from([(), (2,), (2, 2)]), seed=st.integers(0, 2**16),
)
def test_diag_ssm_fft_equals_loop(B, T, H, M, E, seed):
    dA, dB, C = s4d_params(H, M, seed)
    u = torch.randn(B, T, H, *E, generator=gen(seed + 1))
    torch.testing.assert_close(diag_ssm(u, dA, dB, C), diag_ssm_loop(u, dA, dB, C), atol=1e-4, rtol=1e-4)


def test_diag_ssm_kernel_is_the_impulse_response():
    dA, dB, C = s4d_params(3, 16, 0)
    impulse = torch.zeros(1, 30, 3)
    impulse[:, 0] = 1.0
    response = diag_ssm_loop(impulse, dA, dB, C)[0]
    torch.testing.assert_close(diag_ssm_kernel(dA, dB, C, 30), response, atol=1e-5, rtol=1e-5)


def test_diag_ssm_gradients_reach_the_parameters():
    dA, dB, C = (p.clone().requires_grad_() for p in s4d_params(2, 8, 0))
    diag_ssm(torch.randn(2, 10, 2, generator=gen(0)), dA, dB, C).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in (dA, dB, C))


# ------------------------------------------------------------------------------- SSD (Mamba-2, Mamba-3)


def ssd_inputs(B, T, H, P, N, R, seed, decay_scale=1.0):
    g = gen(seed)
    x, Bm = torch.randn(B, T, H, P, R, generator=g), torch.randn(B, T, H, N, R, generator=g)
    return x, Bm, torch.randn(B, T, H, N, generator=g), gates(B, T, H, seed + 1, decay_scale)


@FAST
@given(
    B=st.integers(1, 2), T=st.integers(1, 80), H=st.integers(1, 3), P=st.integers(1, 4), N=st.integers(1, 4),
    R=st.integers(1, 2), chunk=st.sampled_from([1, 4, 16, 64]), seed=st.integers(0, 2**16),
)
def test_chunked_ssd_equals_loop_with_gradients(B, T, H, P, N, R, chunk, seed):
    args = ssd_inputs(B, T, H, P, N, R, seed)
    fast = grads(lambda *a: ssd(*a, chunk_size=chunk), args, seed)
    ref = grads(ssd_loop, args, seed)
    for f, r, name in zip(fast, ref, ["y", "x", "B", "C", "log_a"]):
        torch.testing.assert_close(f, r, atol=1e-4, rtol=1e-4, msg=name)


def test_ssd_is_stable_under_strong_decay():
    args = ssd_inputs(2, 50, 2, 3, 4, 2, 0, decay_scale=500.0)
    y = ssd(*args, chunk_size=16)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, ssd_loop(*args), atol=1e-5, rtol=1e-5)


def test_ssd_is_the_masked_attention_form():
    """Sec. 4, eq. 16 of the Mamba-2 paper (R = 1): y = (L ∘ C B^T) x, L_ts = exp(Σ_{r=s+1..t} log a_r) for s <= t."""
    x, Bm, Cm, log_a = ssd_inputs(2, 20, 3, 4, 5, 1, 7)
    c = log_a.cumsum(1)  # [B, T, H]
    L = torch.exp(c[:, :, None] - c[:, None, :]) * torch.ones(20, 20).tril()[None, :, :, None]  # [B, t, s, H]
    M = L * torch.einsum("bthn,bshn->btsh", Cm, Bm[..., 0])
    torch.testing.assert_close(ssd(x, Bm, Cm, log_a, chunk_size=8), torch.einsum("btsh,bshp->bthp", M, x[..., 0]))
