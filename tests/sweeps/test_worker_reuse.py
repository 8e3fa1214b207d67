"""A Ray worker is reused across tasks: a stop requested in one task (a SIGTERM) must not stop the next."""

from mecheval.sweeps.executors import run_one_ray
from mecheval.training import validate_config
from mecheval.training.trainer import STOP


def test_a_reused_worker_starts_clean_after_a_stop(tiny_run, tmp_path):
    STOP.set()  # what a SIGTERM to the worker's previous task left behind
    try:
        summary = run_one_ray(validate_config(tiny_run).model_dump(mode="json"), str(tmp_path / "run"), 1)
    finally:
        STOP.clear()
    assert summary["steps"] == tiny_run["steps"]
