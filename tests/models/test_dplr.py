"""The diagonal-plus-low-rank recurrence (`ops.dplr`): the chunkwise form equals the per-step loop (across
chunk boundaries, at the chunk length it picks itself, per-dimension or per-head decay, with and without the
low-rank term, strong decays), and with w = 1, a = k, b = -β k it is the delta rule of `ops.delta_rule`; the
state at one step per row (from the chunkwise form's chunk-entering states) is the loop's; a state moved at one
step per row and carried forward (the chunkwise form from that state, nothing written) answers as stepping does."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models.ops.chunks import chunk_grid
from mecheval.models.ops.delta_rule import delta_rule_loop
from mecheval.models.ops.dplr import (
    chunk_length,
    dplr,
    dplr_loop,
    dplr_patch_response,
    dplr_state_at,
    dplr_states,
    dplr_states_response,
)

FAST = settings(max_examples=24, deadline=None)


def _inputs(seed, T, H, dk, dv, per_dim, low_rank, decay_scale=1.0):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    q, k, a = randn(2, T, H, dk), randn(2, T, H, dk), randn(2, T, H, dk)
    b = 0.3 * randn(2, T, H, dk)
    log_w = -decay_scale * torch.rand(2, T, H, dk if per_dim else 1, generator=g, dtype=torch.float64)
    return q, k, randn(2, T, H, dv), log_w, *((a, b) if low_rank else (None, None))


@FAST
@given(seed=st.integers(0, 999), T=st.integers(1, 50), H=st.sampled_from([1, 3]), dk=st.sampled_from([1, 4]),
       dv=st.sampled_from([1, 3]), per_dim=st.booleans(), low_rank=st.booleans(), chunk=st.sampled_from([4, 16, None]),
       decay_scale=st.sampled_from([1.0, 12.0]))
def test_chunkwise_form_equals_the_loop(seed, T, H, dk, dv, per_dim, low_rank, chunk, decay_scale):
    """Decays that let the pairwise terms factor (up to 1 a step) and decays that do not (up to 12)."""
    args = _inputs(seed, T, H, dk, dv, per_dim, low_rank, decay_scale)
    torch.testing.assert_close(dplr(*args, chunk_size=chunk), dplr_loop(*args), atol=1e-9, rtol=1e-9)
    entering = dplr(None, *args[1:], chunk_size=chunk)  # without q: the state entering each chunk, no output
    L = chunk_grid(T, chunk or chunk_length(args[3]))[1]
    states = dplr_states(*args[1:])
    for i in range(1, entering.shape[1]):
        torch.testing.assert_close(entering[:, i], states[:, i * L - 1], atol=1e-9, rtol=1e-9)
    assert not entering[:, 0].any()


def test_strong_decays_stay_finite_and_exact():
    """log w down to -60 a step: e^{-c_s} alone would overflow float32 within a chunk; the pairwise form does not."""
    args = [x.float() if x is not None else None for x in _inputs(0, 40, 2, 4, 3, True, True, decay_scale=60.0)]
    out = dplr(*args)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, dplr_loop(*args), atol=1e-4, rtol=1e-4)


def test_with_unit_decay_and_a_householder_term_it_is_the_delta_rule():
    q, k, v, _, _, _ = _inputs(1, 37, 2, 4, 3, True, False)
    k = torch.nn.functional.normalize(k, dim=-1)
    beta = torch.rand(2, 37, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    b = beta[..., None]
    no_decay = torch.zeros(2, 37, 2, 1, dtype=torch.float64)
    expect = delta_rule_loop(q, k, v, beta)
    torch.testing.assert_close(dplr(q, b * k, v, no_decay, k, -b * k, chunk_size=8), expect, atol=1e-10, rtol=1e-10)


def test_states_are_the_loops_states():
    q, k, v, log_w, a, b = _inputs(3, 9, 2, 3, 2, True, True)
    states = dplr_states(k, v, log_w, a, b)  # [n, T, H, d_k, d_v]
    for t in range(9):  # o_t = S_t^T q_t
        torch.testing.assert_close(torch.einsum("nhkv,nhk->nhv", states[:, t], q[:, t]),
                                   dplr_loop(q, k, v, log_w, a, b)[:, t], atol=1e-10, rtol=1e-10)


@FAST
@given(seed=st.integers(0, 999), T=st.integers(1, 70), per_dim=st.booleans(), low_rank=st.booleans(), data=st.data())
def test_the_state_at_a_step_per_row_is_the_loops(seed, T, per_dim, low_rank, data):
    """Steps anywhere in their chunks (first, last, past the last chunk boundary), rows at different chunks."""
    _, k, v, log_w, a, b = _inputs(seed, T, 2, 4, 3, per_dim, low_rank)
    pos = torch.tensor(data.draw(st.lists(st.integers(0, T - 1), min_size=2, max_size=2)))
    expect = dplr_states(k, v, log_w, a, b)[torch.arange(2), pos]
    torch.testing.assert_close(dplr_state_at(k, v, log_w, a, b, pos), expect, atol=1e-9, rtol=1e-9)


@FAST
@given(seed=st.integers(0, 999), T=st.integers(1, 45), per_dim=st.booleans(), low_rank=st.booleans(), data=st.data(),
       chunkwise=st.sampled_from([True, False, None]))
def test_a_state_moved_at_one_step_per_row_answers_as_stepping_does(seed, T, per_dim, low_rank, data, chunkwise):
    """Rows moved at different steps (the last one too: nothing after it), across chunk boundaries, either way."""
    q, _, _, log_w, a, b = _inputs(seed, T, 2, 4, 3, per_dim, low_rank)
    step = torch.tensor(data.draw(st.lists(st.integers(0, T - 1), min_size=2, max_size=2)))
    dS = torch.randn(2, 2, 4, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    moves = torch.zeros(2, T, 2, 4, 3, dtype=torch.float64)
    moves[torch.arange(2), step] = dS
    expect = dplr_states_response(q, log_w, a, b, moves)
    torch.testing.assert_close(dplr_patch_response(q, log_w, a, b, dS, step, chunkwise), expect, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("chunkwise", [True, False])
def test_the_patch_response_differentiates(chunkwise):
    """Its gradients by finite differences, either way (the stepping way adds each row's move in place)."""
    q, _, _, log_w, a, b = _inputs(5, 11, 1, 3, 2, True, True)
    dS = torch.randn(2, 1, 3, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    step = torch.tensor([2, 6])
    leaves = [x.clone().requires_grad_() for x in (q, log_w, a, b, dS)]
    assert torch.autograd.gradcheck(lambda *xs: dplr_patch_response(*xs, step, chunkwise), leaves)
