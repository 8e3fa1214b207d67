"""MQAR (zoology): context, one query per key, power-law query positions, [B, Q] roles."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.tasks import make_task

TASK = make_task("mqar")
FILLED = make_task("mqar", seq_len=32, n_pairs=4, vocab_size=64, random_filler=1)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), task=st.sampled_from([TASK, FILLED]))
def test_context_queries_and_roles(seed, task):
    b = task.sample(32, seed=seed)
    p = task.params
    k, t = p.n_pairs, b.tokens
    assert t.shape == (32, p.seq_len) and b.answer.shape == (32, k)
    keys, values = t[:, 0 : 2 * k : 2], t[:, 1 : 2 * k : 2]
    assert ((keys >= 1) & (keys < p.vocab_size // 2)).all()
    assert ((values >= p.vocab_size // 2) & (values < p.vocab_size)).all()
    assert all(len(set(r.tolist())) == k for r in keys) and all(len(set(r.tolist())) == k for r in values)
    rows = torch.arange(32)[:, None]
    key, value, query = b.roles["key"], b.roles["value"], b.roles["query"]
    assert (t[rows, query] == t[rows, key]).all() and (value == key + 1).all()
    assert (t[rows, value] == b.answer).all() and (b.answer_pos == query).all()
    assert (query >= 2 * k).all() and ((query - 2 * k) % 2 == 0).all()
    assert (query.diff(dim=1) > 0).all()  # ordered by position
    assert all(sorted(r.tolist()) == list(range(0, 2 * k, 2)) for r in key)  # each key queried once


def test_query_positions_cluster_near_the_context():
    b = TASK.sample(4000, seed=0)
    slot = (b.roles["query"] - 2 * TASK.params.n_pairs) // 2  # [B, K]
    hist = torch.bincount(slot.flatten(), minlength=24).float()
    assert hist[0] > hist[4] > hist[-1]  # ∝ i^(a-1): decreasing with the slot
    assert torch.equal(TASK.sample(8, 3).tokens, TASK.sample(8, 3).tokens)
