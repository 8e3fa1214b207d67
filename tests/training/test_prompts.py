"""The prompts a run saw in training, and test examples drawn outside them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mecheval.tasks import make_task
from mecheval.training.data import TrainStream
from mecheval.training.prompts import prompt_ids, seen, training_prompt_ids, unseen_sample


def test_a_planted_training_prompt_is_counted_seen():
    task = make_task("ar", n_pairs=4, n_keys=64, n_values=64)
    ids = training_prompt_ids(task, batch_size=8, seed=0, steps=10, pool_size=40, order="replay")
    pool = TrainStream(task, 8, 0, 40, "replay").pool
    test = task.sample(16, seed=0, split="test")
    planted = test.tokens.clone()
    planted[3] = pool.tokens[7]  # one test example is a training example
    mask = seen(test.with_tokens(planted), ids)
    assert mask.tolist() == [i == 3 for i in range(16)]


def test_only_the_steps_a_run_trained_count():
    """A run that stopped before reading its whole pool saw only the batches it read."""
    task = make_task("ar", n_pairs=4, n_keys=64, n_values=64)
    stream = TrainStream(task, 8, 0, 40, "replay")
    early = training_prompt_ids(task, 8, 0, steps=2, pool_size=40, order="replay")
    assert len(early) == 16 and set(early) == set(prompt_ids(stream.pool.select(slice(0, 16))))
    assert len(training_prompt_ids(task, 8, 0, steps=5, pool_size=40, order="replay")) == 40


def test_prompt_ids_ignore_the_answer_and_what_follows():
    task = make_task("ar", n_pairs=4, n_keys=64, n_values=64)
    batch = task.sample(4, seed=0, split="test")
    tail = batch.tokens.clone()
    tail[:, batch.answer_pos[0] + 1 :] = 0
    assert np.array_equal(prompt_ids(batch), prompt_ids(batch.with_tokens(tail)))


def test_unseen_sample_draws_past_the_seen_prompts():
    """ATR easy repeats many short documents: a third of its test prompts occur in a 100k pool."""
    task = make_task("atr", grammar="easy")
    ids = training_prompt_ids(task, 32, 0, steps=100, pool_size=3200, order="replay")
    batch, where = unseen_sample(task, 128, 0, "test", ids)
    assert len(batch) == 128 and not seen(batch, ids).any()
    assert where["prompts"] == "unseen" and 0 < where["seen_share"] < 1 and where["n_drawn"] > 128
    every, where = unseen_sample(task, 128, 0, "test", None)
    assert where == {"prompts": "all", "seen_share": 0.0, "n_drawn": 128}
    assert torch.equal(every.tokens, task.sample(128, seed=0, split="test").tokens)


def test_unseen_sample_says_when_too_few_prompts_are_unseen():
    task = make_task("ar", n_pairs=1, n_keys=2, n_values=2)  # 4 documents in all
    ids = training_prompt_ids(task, 64, 0, steps=4, pool_size=None)
    with pytest.raises(ValueError, match="not seen in training"):
        unseen_sample(task, 8, 0, "test", ids)
