"""Fixtures for the whole suite: one torch thread per test and per sweep worker, and a tiny AR
training run as plain data."""

import copy
import os

import pytest
import torch

# Sweep workers (spawned, and `mecheval` subprocesses) inherit this: one thread, as in the tests, so
# a run trained by a worker is bitwise comparable to one trained here, whatever the core count.
os.environ["MECHEVAL_THREADS"] = "1"

TINY_RUN = {
    "task": {"name": "ar", "params": {"n_pairs": 4, "n_keys": 16, "n_values": 16}},
    "model": {"d_model": 16, "max_len": 16},
    "steps": 24,
    "batch_size": 16,
    "log_every": 4,
    "checkpoint_every": 8,
    "eval": {"every": 12, "size": 32},
    "device": "cpu",
}


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as in every sweep worker: tiny models run far faster on one thread than on two
    contended ones (2 shared cores), and in-process references stay bitwise comparable."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_run() -> dict:
    """A tiny AR run (4 pairs over 16 + 16 tokens, d=16, 24 steps) as a fresh copy of plain data."""
    return copy.deepcopy(TINY_RUN)
