"""A small AR task for the intervention tests."""

from __future__ import annotations

import pytest

from mecheval.tasks import Task, make_task


def small_ar() -> Task:
    return make_task("ar", n_pairs=4, n_keys=16, n_values=16)


@pytest.fixture(scope="session")
def ar_task() -> Task:
    return small_ar()


@pytest.fixture(scope="module")
def handbuilt_batch(ar_task):
    """The test examples the hand-built models are read on."""
    return ar_task.sample(128, seed=5, split="test")
