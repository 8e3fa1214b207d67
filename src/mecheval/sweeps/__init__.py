"""Sweeps: a grid of training configs -> named run directories (local processes or Ray) -> one table."""

from mecheval.sweeps.runner import run_sweep
from mecheval.sweeps.spec import RunSpec, SweepConfig, expand, load_sweep
from mecheval.sweeps.table import best_lr, collect

__all__ = ["RunSpec", "SweepConfig", "best_lr", "collect", "expand", "load_sweep", "run_sweep"]
