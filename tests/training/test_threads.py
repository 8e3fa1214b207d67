"""The thread policy: C // W threads per sweep worker, never more than the cores other processes leave free,
and never slower than one thread (measured)."""

from __future__ import annotations

import os
import time

import pytest
import torch

from mecheval.training import validate_config
from mecheval.training import threads
from mecheval.training.threads import fastest, fastest_threads, free_cores, threads_per_worker, use_fastest_threads

TINY = {"task": {"name": "ar", "params": {"n_pairs": 2, "n_keys": 8, "n_values": 8}},
        "model": {"preset": "attention", "d_model": 16}, "steps": 1, "batch_size": 4}


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


@pytest.mark.parametrize(("load", "cores", "free"), [(1.0, 2, 2), (2.0, 2, 1), (3.2, 2, 1), (0.2, 8, 8), (3.0, 8, 6)])
def test_free_cores_leave_out_what_other_processes_keep_busy(monkeypatch, load, cores, free):
    """The load average beyond this process's own one (itself about 1 while it trains) is busy elsewhere."""
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert free_cores(cores) == free


def test_a_busy_machine_gets_one_thread_without_measuring(monkeypatch):
    """Three trainings on two cores: a second thread would spin, so none is offered, whatever a measurement taken
    while the others paused would say."""
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 3.0, 3.0))
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setattr(threads, "fastest_threads", lambda *a: pytest.fail("measured on a busy machine"))
    before = torch.get_num_threads()
    try:
        assert use_fastest_threads(validate_config(TINY), 2) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_use_fastest_threads_keeps_the_global_rng(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # an idle machine of 2 cores: it measures
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    cfg = validate_config(TINY)
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
