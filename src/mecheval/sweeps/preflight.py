"""Checks before a sweep writes anything: every run's model builds, and every run directory already
on disk holds the run the sweep asks for (its fingerprint), not one of an earlier, different spec.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mecheval.sweeps.spec import RunSpec
from mecheval.training.config import ConfigError, config_diff, read_yaml
from mecheval.training.run_dir import CONFIG, RunDir


def check_models(runs: list[RunSpec]) -> None:
    """Builds each distinct model config on the meta device (no memory, no compute); a ConfigError
    names the first run whose model cannot be built (e.g. d_model not divisible by n_heads)."""
    from mecheval.models import build_model

    seen = set()
    for run in runs:
        key = json.dumps(run.config.model.model_dump(mode="json"), sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        try:
            with torch.device("meta"):
                build_model(run.config.model)
        except (ValueError, TypeError, KeyError) as e:
            raise ConfigError(f"run {run.name}: model: {e}") from None


def stored_diff(run: RunDir, spec: RunSpec) -> list[str]:
    """[] if `run` holds no run or this run; else what differs (fields, or why the files disagree)."""
    if not run.started:
        return []
    try:
        raw = read_yaml(run / CONFIG)
    except ConfigError as e:
        return [str(e)]
    try:
        diff = config_diff(run.read_config(), spec.config)
    except ConfigError:  # a config of another schema: compare the fields as written
        diff = config_diff(raw, spec.config) or ["the config no longer validates (its schema changed)"]
    if diff or not run.finished:
        return diff
    try:
        stored = run.read_summary().get("fingerprint")
    except (ConfigError, OSError) as e:
        return [str(e)]
    if stored != spec.config.fingerprint():
        return [f"summary.json has fingerprint {stored}, this spec gives {spec.config.fingerprint()}"]
    return []


def changed_runs(runs: list[RunSpec], runs_dir: Path) -> dict[str, list[str]]:
    """name -> differences, for each run whose directory holds a different run."""
    diffs = {run.name: stored_diff(RunDir(runs_dir / run.name), run) for run in runs}
    return {name: diff for name, diff in diffs.items() if diff}
