"""A sweep through a real local Ray instance (loopback only): a worker killed mid-run is retried.

Slow (a Ray instance starts); skipped where Ray is not installed (`pip install 'mecheval[ray]'`)."""

import json
import os
import signal
import threading
import time

import pytest
import torch
from safetensors.torch import load_file

from mecheval.sweeps import SweepConfig, expand, run_sweep
from mecheval.training import train
from mecheval.training.run_dir import CHECKPOINT, WORKER, RunDir

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'mecheval[ray]')")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    yield
    ray.shutdown()


def sweep_until_checkpoint(spec: SweepConfig, out, name: str):
    """(thread, outcomes, run) of a Ray sweep started in a thread, once run `name` has a checkpoint."""
    outcomes = []
    sweep = threading.Thread(target=lambda: outcomes.extend(run_sweep(spec, out, executor="ray")))
    sweep.start()
    long = RunDir(out / "runs" / name)
    deadline = time.time() + 120
    while not (long / CHECKPOINT).exists() and time.time() < deadline:
        time.sleep(0.01)
    assert (long / CHECKPOINT).exists(), "the long run never checkpointed"
    return sweep, outcomes, long


def test_ray_sweep_retries_a_killed_worker(tmp_path, base, local_ray):
    spec = SweepConfig(base=base, max_retries=2, list=[
        {"seed": 0, "steps": 300, "checkpoint_every": 10},  # long enough to be killed mid-way
        {"seed": 1},
    ])
    runs = {r.config.seed: r for r in expand(spec)}
    out = tmp_path / "out"

    sweep, outcomes, long = sweep_until_checkpoint(spec, out, runs[0].name)
    killed = json.loads((long / WORKER).read_text())["pid"]
    os.kill(killed, signal.SIGKILL)
    sweep.join(timeout=120)

    by_name = {o.name: o for o in outcomes}
    assert by_name[runs[0].name].error is None and by_name[runs[1].name].error is None
    assert json.loads((long / WORKER).read_text())["pid"] != killed  # a retry finished the run
    train(runs[0].config, tmp_path / "ref", quiet=True)  # nothing lost: equal to an uninterrupted run
    ref, got = load_file(str(tmp_path / "ref" / "model.safetensors")), load_file(str(long / "model.safetensors"))
    assert all(torch.equal(ref[k], got[k]) for k in ref)


def test_ray_sweep_retries_a_run_whose_worker_got_sigterm_and_the_worker_starts_clean(tmp_path, base, local_ray):
    spec = SweepConfig(base=base, max_retries=2, list=[
        {"seed": 0, "steps": 300, "checkpoint_every": 10},  # long enough to be stopped mid-way
        {"seed": 1}, {"seed": 2}, {"seed": 3},  # later runs, some on the worker that got the signal
    ])
    runs = {r.config.seed: r for r in expand(spec)}
    out = tmp_path / "out"

    sweep, outcomes, long = sweep_until_checkpoint(spec, out, runs[0].name)
    os.kill(json.loads((long / WORKER).read_text())["pid"], signal.SIGTERM)  # the run checkpoints and stops
    sweep.join(timeout=180)

    assert [o.error for o in outcomes] == [None] * 4, outcomes  # retried, and no "the sweep is stopping"
    train(runs[0].config, tmp_path / "ref", quiet=True)  # nothing lost: equal to an uninterrupted run
    ref, got = load_file(str(tmp_path / "ref" / "model.safetensors")), load_file(str(long / "model.safetensors"))
    assert all(torch.equal(ref[k], got[k]) for k in ref)
