"""The thread policy: C // W threads per sweep worker, and never slower than one thread (measured)."""

from __future__ import annotations

import time

import pytest
import torch

from mecheval.training import validate_config
from mecheval.training.threads import fastest, fastest_threads, threads_per_worker, use_fastest_threads


@pytest.mark.parametrize(("workers", "cores", "threads"), [(1, 2, 2), (2, 2, 1), (3, 2, 1), (2, 8, 4), (3, 8, 2)])
def test_threads_per_worker_shares_the_cores(workers, cores, threads):
    assert threads_per_worker(workers, cores) == threads


def test_fastest_takes_the_lowest_median_and_fewer_threads_on_a_tie():
    assert fastest({1: [1.0, 5.0, 1.0], 2: [0.5, 0.9, 9.0]}) == 2
    assert fastest({1: [1.0], 2: [1.0]}) == 1


@pytest.mark.parametrize(("slow_with", "picked"), [(2, 1), (1, 2)])
def test_fastest_threads_measures_and_keeps_the_faster(slow_with, picked):
    before = torch.get_num_threads()
    try:
        step = lambda: time.sleep(0.004 if torch.get_num_threads() == slow_with else 0.0)  # noqa: E731
        assert fastest_threads(step, 2) == picked
        assert torch.get_num_threads() == picked
    finally:
        torch.set_num_threads(before)


def test_use_fastest_threads_keeps_the_global_rng():
    cfg = validate_config({"task": {"name": "ar", "params": {"n_pairs": 2, "n_keys": 8, "n_values": 8}},
                           "model": {"preset": "attention", "d_model": 16}, "steps": 1, "batch_size": 4})
    before = torch.get_num_threads()
    try:
        torch.manual_seed(0)
        expected = torch.rand(3)
        torch.manual_seed(0)
        assert use_fastest_threads(cfg, 2) in (1, 2)
        torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)
        assert use_fastest_threads(cfg, 1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
