"""A sweep through a real local Ray instance (loopback only): a worker killed mid-run is retried."""

import json
import os
import signal
import threading
import time

import pytest
import ray
import torch
import yaml
from safetensors.torch import load_file

from mecheval.sweeps import SweepConfig, expand, run_sweep
from mecheval.training import train
from mecheval.training.run_dir import CHECKPOINT, WORKER, RunDir



@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_sweep_retries_a_killed_worker(tmp_path, base, local_ray):
    spec = SweepConfig(base=base, max_retries=2, list=[
        {"seed": 0, "steps": 300, "checkpoint_every": 10},  # long enough to be killed mid-way
        {"seed": 1},
        {"seed": 2},  # its directory holds another run: fails with a clear error, the rest go on
    ])
    runs = {r.config.seed: r for r in expand(spec)}
    out = tmp_path / "out"
    clash = RunDir(out / "runs" / runs[2].name)
    clash.path.mkdir(parents=True)
    (clash / "config.yaml").write_text(yaml.safe_dump({**base, "steps": 5, "seed": 2}))

    outcomes = []
    sweep = threading.Thread(target=lambda: outcomes.extend(run_sweep(spec, out, executor="ray")))
    sweep.start()
    long = RunDir(out / "runs" / runs[0].name)
    deadline = time.time() + 120
    while not (long / CHECKPOINT).exists() and time.time() < deadline:
        time.sleep(0.01)
    assert (long / CHECKPOINT).exists(), "the long run never checkpointed"
    killed = json.loads((long / WORKER).read_text())["pid"]
    os.kill(killed, signal.SIGKILL)
    sweep.join(timeout=120)

    by_name = {o.name: o for o in outcomes}
    assert by_name[runs[0].name].error is None and by_name[runs[1].name].error is None
    assert "steps" in by_name[runs[2].name].error and not clash.finished
    assert json.loads((long / WORKER).read_text())["pid"] != killed  # a retry finished the run
    train(runs[0].config, tmp_path / "ref", quiet=True)  # nothing lost: equal to an uninterrupted run
    ref, got = load_file(str(tmp_path / "ref" / "model.safetensors")), load_file(str(long / "model.safetensors"))
    assert all(torch.equal(ref[k], got[k]) for k in ref)
