"""Every task samples a deterministic function of (params, seed, split), different across seeds and splits."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.tasks import make_task

TASKS = {
    "ar": make_task("ar", n_pairs=8, n_keys=64, n_values=64),
    "mqar": make_task("mqar"),
    "atr": make_task("atr", holdout_frac=0.2),
}


@pytest.mark.parametrize("name", TASKS)
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_deterministic_and_seed_split_dependent(name, seed):
    task = TASKS[name]
    a = task.sample(16, seed=seed)
    assert torch.equal(a.tokens, task.sample(16, seed=seed).tokens)
    assert not torch.equal(a.tokens, task.sample(16, seed=seed + 1).tokens)
    assert not torch.equal(a.tokens, task.sample(16, seed=seed, split="test").tokens)
