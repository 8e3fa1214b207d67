"""corrupt: one token differs, at the role, by a different token of the same kind; answers kept."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.tasks import make_task

TASKS = {
    "ar": make_task("ar"),
    "ar_small": make_task("ar", n_pairs=8, n_keys=9, n_values=64),
    "mqar": make_task("mqar"),
    "atr": make_task("atr"),
    "atr_large": make_task("atr", grammar="large_vocab"),
}
CASES = [(name, role) for name, task in TASKS.items() for role in task.corruptible_roles]


def kind_range(task, role):
    if hasattr(task, "terminal_range"):
        return task.terminal_range
    return task.value_range if role == "value" else task.key_range


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(CASES), seed=st.integers(0, 2**31 - 1))
def test_one_token_of_the_same_kind_changes(case, seed):
    name, role = case
    task = TASKS[name]
    clean = task.sample(32, seed=seed, split="test")
    bad = task.corrupt(clean, role, seed=seed)
    pos = clean.roles[role]
    pos = pos[:, 0] if pos.dim() == 2 else pos
    rows = torch.arange(len(clean))
    diff = clean.tokens != bad.tokens
    assert (diff.sum(1) == 1).all() and diff[rows, pos].all()
    new, old = bad.tokens[rows, pos], clean.tokens[rows, pos]
    lo, hi = kind_range(task, role)
    assert ((new >= lo) & (new < hi)).all() and (new != old).all()
    assert torch.equal(bad.answer, clean.answer) and torch.equal(bad.answer_pos, clean.answer_pos)
    assert all(torch.equal(bad.roles[r], clean.roles[r]) for r in clean.roles)
    if not hasattr(task, "terminal_range"):  # AR / MQAR: the new token is absent from the original
        assert not (clean.tokens == new[:, None]).any(1).any()
    assert torch.equal(task.corrupt(clean, role, seed=seed).tokens, bad.tokens)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_corrupted_key_leaves_the_answer_underivable(seed):
    ar = TASKS["ar"]
    clean = ar.sample(64, seed=seed)
    assert ar.answer_derivable(clean).all()
    assert not ar.answer_derivable(ar.corrupt(clean, "key", seed)).any()
    atr = TASKS["atr"]
    clean = atr.sample(256, seed=seed)
    bad = atr.corrupt(clean, "key", seed)
    derivable = atr.answer_derivable(bad).numpy()
    # still derivable only via an earlier occurrence of the query type whose head is the answer
    t, parent = bad.tokens.numpy(), clean.extra["parent"].numpy()
    for i in np.flatnonzero(derivable):
        q, k = t[i, clean.roles["query"][i]], int(clean.roles["key"][i])
        earlier = [p for p in range(1, k) if t[i, p] == q]
        assert earlier and t[i, parent[i, earlier[-1]]] == clean.answer[i]
    assert derivable.mean() < 0.2


def test_unknown_role_and_exhausted_range():
    with pytest.raises(ValueError, match="sep"):
        TASKS["ar"].corrupt(TASKS["ar"].sample(2, 0), "sep", 0)
    full = make_task("ar", n_pairs=4, n_keys=4, n_values=8)
    with pytest.raises(ValueError, match="none is absent"):
        full.corrupt(full.sample(2, 0), "key", 0)
