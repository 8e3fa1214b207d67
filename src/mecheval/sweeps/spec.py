"""A sweep: a base config plus a grid and/or a list of overrides over dotted fields -> named runs.

    base: {task: …, model: …, steps: …}       # or a path to a train config, relative to the sweep file
    grid: {model.mixer: [attention, based], optim.lr: [1e-3, 3e-3]}   # every combination
    list: [{model.d_model: 16}, {model.d_model: 32, batch_size: 64}]  # these points (× the grid)
    max_retries: 2                             # Ray: re-runs of a run whose worker died

Each run's name comes from the fields the grid and list set, sorted by their dotted path, e.g.
`mixer-attention_lr-0.001`, so re-expanding the same sweep (in any key order) gives the same names.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mecheval.training.config import ConfigError, TrainConfig, format_validation_error, read_yaml, validate_config


class SweepConfig(BaseModel):
    """The sweep file: `base` (a train config, or its path), `grid`, `list` (alias of `points`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    base: dict[str, Any] | str
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    points: list[dict[str, Any]] = Field(default_factory=list, alias="list")
    max_retries: int = Field(2, ge=0)


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: its stable name, its overrides over the base, and the validated config."""

    name: str
    overrides: dict[str, Any]
    config: TrainConfig


def load_sweep(path: str | Path) -> SweepConfig:
    path = Path(path)
    try:
        sweep = SweepConfig.model_validate(read_yaml(path))
    except ValidationError as e:
        raise ConfigError(f"{path}: invalid sweep\n{format_validation_error(e)}") from None
    if isinstance(sweep.base, str):
        sweep = sweep.model_copy(update={"base": read_yaml(path.parent / sweep.base)})
    return sweep


_SCIENTIFIC = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")


def _format(value: Any) -> str:
    if isinstance(value, str) and _SCIENTIFIC.fullmatch(value):
        value = float(value)  # YAML 1.1 reads `1e-3` as a string; name it like 0.001
    if isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, (list, tuple)):
        text = "+".join(_format(v) for v in value)
    elif isinstance(value, dict):
        text = "+".join(f"{k}-{_format(v)}" for k, v in value.items())
    else:
        text = str(value)
    return re.sub(r"[^A-Za-z0-9.+-]", "_", text)


def short_keys(keys: list[str]) -> dict[str, str]:
    """Each dotted key -> its last part, or the whole key where last parts collide."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}


def run_name(overrides: dict[str, Any], keys: list[str]) -> str:
    """`mixer-attention_lr-0.001` from the values of `keys` (the fields the sweep varies)."""
    short = short_keys(keys)
    parts = [f"{short[k]}-{_format(overrides[k])}" for k in keys if k in overrides]
    return "_".join(parts) or "run"


def expand(sweep: SweepConfig) -> list[RunSpec]:
    """Every run of the sweep, validated; an error names the run and the field at fault."""
    base = read_yaml(sweep.base) if isinstance(sweep.base, str) else sweep.base
    return [RunSpec(name, overrides, validate_config(base, overrides, source=f"run {name}"))
            for name, overrides in run_overrides(sweep)]


def run_overrides(sweep: SweepConfig) -> list[tuple[str, dict[str, Any]]]:
    """(name, overrides over the base) of every run of the sweep, nothing validated or imported."""
    axes = list(sweep.grid)
    empty = [a for a in axes if not sweep.grid[a]]
    if empty:
        raise ConfigError(f"grid: no values for {empty}")
    keys = sorted({k for point in sweep.points for k in point} | set(axes))
    runs, seen = [], {}
    for point in sweep.points or [{}]:
        for values in itertools.product(*(sweep.grid[a] for a in axes)):
            overrides = {**point, **dict(zip(axes, values))}
            name = run_name(overrides, keys)
            if name in seen:
                raise ConfigError(f"runs {seen[name]} and {overrides} get the same name {name!r}")
            seen[name] = overrides
            runs.append((name, overrides))
    return runs
