"""`TrainConfig`: one validated description of a training run (task, model, optimiser, schedule, data).

A config comes from YAML plus `--set a.b=value` overrides (each value parsed as YAML), and every
error names the offending field, e.g. `optim.lr: Input should be greater than 0`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from mecheval.common import Checked, ConfigError, dump_yaml, flatten, format_validation_error, load_yaml, set_dotted
from mecheval.models.config import AnyModelConfig


MAX_BATCH, MAX_EXAMPLES = 2**16, 2**22  # a batch, and a set of examples (eval, a training pool), at most


class _Strict(Checked):
    model_config = ConfigDict(extra="forbid")


class TaskConfig(_Strict):
    """A task by name and its parameters: `make_task(name, **params)`."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class OptimConfig(_Strict):
    """AdamW with linear warmup over `warmup` of the steps, then cosine decay to 0 (as published)."""

    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0)
    warmup: float = Field(0.1, ge=0, le=1)
    schedule: Literal["cosine", "constant"] = "cosine"


class EvalConfig(_Strict):
    """Accuracy on `size` examples of each split every `every` steps (and at the last step).

    The examples are sampled from each split by the task (not from the `train_size` pool) and fixed
    by `seed` alone, so every run of a sweep is scored on the same ones.
    """

    every: int = Field(100, gt=0)
    size: int = Field(320, gt=0, le=MAX_EXAMPLES)
    splits: list[str] = Field(default_factory=lambda: ["train", "test"], min_length=1)
    seed: int = Field(1234, ge=0)
    batch_size: int = Field(512, gt=0, le=MAX_BATCH)


class EarlyStop(_Strict):
    """Opt-in: stop once `split` accuracy is >= `acc` at `patience` evaluations in a row (the summary
    records the step). The schedule keeps its length (`steps`); the run just ends sooner."""

    acc: float = Field(0.99, gt=0, le=1)
    patience: int = Field(2, ge=1)
    split: str = "test"


class Snapshots(_Strict):
    """Weights kept at chosen steps (`snapshots/step-{s:07d}.safetensors`, weights only): step 0, every
    `every` steps, `log` steps spaced evenly in log(step) up to the last, the listed `steps`, and the
    last step. They do not change the run (not part of its identity); `mecheval intervene RUN
    --over-training` reads them."""

    every: int | None = Field(None, gt=0)
    log: int | None = Field(None, gt=1, description="how many log-spaced steps")
    steps: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _asks_for_steps(self) -> "Snapshots":
        if self.every is None and self.log is None and not self.steps:
            raise ValueError("snapshots: give every, log or steps")
        if any(s < 0 for s in self.steps):
            raise ValueError(f"snapshots.steps must be >= 0, got {self.steps}")
        return self

    def schedule(self, total: int) -> list[int]:
        """The steps (0 … total) whose weights are kept, sorted."""
        out = {0, total, *(s for s in self.steps if s <= total)}
        if self.every:
            out |= set(range(self.every, total + 1, self.every))
        if self.log:
            out |= {round(total ** (i / (self.log - 1))) for i in range(self.log)}
        return sorted(out)


class Resources(_Strict):
    """What one run asks for: Ray task resources, and the torch threads of a Ray task or of
    `mecheval train` (int(num_cpus)); local sweep workers use one thread each."""

    num_cpus: float = Field(1, gt=0)
    num_gpus: float = Field(0, ge=0)


class LoggerConfig(_Strict):
    """Optional experiment loggers (each imported only when enabled)."""

    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "mecheval"


class TrainConfig(_Strict):
    """Everything that determines a training run. `model.vocab_size` defaults to the task's."""

    task: TaskConfig
    model: AnyModelConfig  # a zoo LM, or a transformers model (`hf`)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    steps: int = Field(gt=0)
    batch_size: int = Field(32, gt=0, le=MAX_BATCH)
    train_size: int | None = Field(None, gt=0, le=MAX_EXAMPLES, description="a fixed pool of training examples; None: fresh each step")
    train_order: Literal["shuffle", "replay"] = Field(
        "shuffle", description="the pool's order per epoch: a new permutation, or the same order every epoch (the study's)"
    )
    length_groups: int = Field(
        1, ge=1, description="each batch computed as up to this many groups of similar length, each at its own "
        "length, gradients accumulated (the same update as the padded batch, 1); evaluation likewise; default: "
        "the task's (Task.length_groups: 1 where every document has one length)",
    )
    eval: EvalConfig = Field(default_factory=EvalConfig)
    early_stop: EarlyStop | None = None
    log_every: int = Field(10, gt=0)
    checkpoint_every: int = Field(500, gt=0)
    snapshots: Snapshots | None = None
    seed: int = Field(0, ge=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    bf16: bool = Field(False, description="bf16 autocast; only on CUDA (ignored on CPU)")
    resources: Resources = Field(default_factory=Resources)
    loggers: LoggerConfig = Field(default_factory=LoggerConfig)

    @model_validator(mode="before")
    @classmethod
    def _task_defaults(cls, data: Any) -> Any:
        """The model's vocabulary defaults to the task's, and may not be smaller; `length_groups` defaults to
        the task's; a task with a fixed training set (`Task.training_set_size`) needs `train_size` within it."""
        if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
            return data
        task = data.get("task")
        if not isinstance(task, dict) or "name" not in task:
            return data
        vocab, groups, fixed = task_defaults(task["name"], json.dumps(task.get("params", {}), sort_keys=True))
        size = data.get("train_size")
        if fixed is not None and not (isinstance(size, int) and 0 < size <= fixed):
            raise ValueError(f"train_size: the task trains on its fixed set of {fixed} examples; give train_size "
                             f"1..{fixed} (the set's first examples), got {size}")
        model = dict(data["model"])
        model.setdefault("vocab_size", vocab)
        if isinstance(model["vocab_size"], int) and model["vocab_size"] < vocab:
            raise ValueError(f"model.vocab_size={model['vocab_size']} < the task's vocab_size={vocab}")
        return {"length_groups": groups, **data, "model": model}

    @model_validator(mode="after")
    def _early_stop_split(self) -> "TrainConfig":
        if self.early_stop is not None and self.early_stop.split not in self.eval.splits:
            raise ValueError(f"early_stop.split {self.early_stop.split!r} is not evaluated (eval.splits: {self.eval.splits})")
        return self

    def identity(self) -> dict:
        """The fields that change the weights or metrics (not device, checkpoints, snapshots, resources, loggers).
        Fields added after runs were made are left out at their defaults, so those runs keep their identity."""
        return _without_later_defaults(self.model_dump(mode="json", exclude=NOT_IDENTITY))

    def fingerprint(self) -> str:
        """A hash of `identity()`: equal fingerprints, equal runs."""
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:16]


NOT_IDENTITY = {"device", "checkpoint_every", "snapshots", "resources", "loggers"}
# field (dotted) -> the default that earlier runs trained with (a config.yaml without the field trained so:
# `as_trained`, where today's default differs, as length_groups now comes from the task)
ADDED_LATER = {"train_order": "shuffle", "length_groups": 1, "model.norm_eps": None, "model.final_norm_bias": False, "model.build": "mecheval",
               "model.block_bias": False,
               "task.params.grammar_draw": "mecheval"}


def _without_later_defaults(identity: dict, prefix: str = "") -> dict:
    """`identity` without the fields of ADDED_LATER at their defaults, at any depth."""
    kept = {}
    for k, v in identity.items():
        key = prefix + k
        if key in ADDED_LATER and v == ADDED_LATER[key]:
            continue
        kept[k] = _without_later_defaults(v, key + ".") if isinstance(v, dict) else v
    return kept


def as_trained(data: dict) -> dict:
    """A run's own config.yaml: the top-level fields added since it was written (ADDED_LATER) at the values it
    trained with, not today's defaults."""
    return {k: v for k, v in ADDED_LATER.items() if "." not in k} | data


def config_diff(old: TrainConfig | dict, new: TrainConfig) -> list[str]:
    """`field: run has X, given Y` for each field of the identity that differs ([] for the same run).

    `old` may be a raw dict (a config.yaml as written); fields only one side has are listed too.
    """
    if isinstance(old, TrainConfig):
        if old.fingerprint() == new.fingerprint():
            return []
        old = old.identity()
    a = flatten(_without_later_defaults({k: v for k, v in old.items() if k not in NOT_IDENTITY}))
    b = flatten(new.identity())
    return [f"{k}: run has {a.get(k, '(absent)')!r}, given {b.get(k, '(absent)')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


@functools.lru_cache(maxsize=64)
def task_defaults(name: str, params_json: str) -> tuple[int, int, int | None]:
    """(vocab_size, length_groups, training_set_size) of the task: the defaults a config takes from it, and the
    size of its fixed training set (None: drawn)."""
    from mecheval.tasks import make_task

    try:
        task = make_task(name, **json.loads(params_json))
        return task.vocab_size, task.length_groups, task.training_set_size
    except (TypeError, ValueError, KeyError) as e:
        raise ValueError(f"task: cannot build {name!r} with params {params_json}: {e}") from None


def parse_override(text: str) -> tuple[str, Any]:
    """`"a.b=value"` -> ("a.b", yaml-parsed value)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} is not of the form key=value")
    return key.strip(), load_yaml(raw, f"override {text!r}") if raw.strip() else None


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    data = load_yaml(text, str(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def validate_config(data: dict, overrides: dict[str, Any] | None = None, source: str = "config") -> TrainConfig:
    """A TrainConfig from a raw dict plus dotted overrides; a ConfigError naming the fields otherwise."""
    data = json.loads(json.dumps(data))  # a deep copy of plain data
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{source}: invalid config\n{format_validation_error(e)}") from None


def load_config(path: str | Path | None, sets: list[str] = (), trained: bool = False) -> TrainConfig:
    """`mecheval train [CONFIG.yaml] --set a.b=v …`: the file (if any), then each override in order.
    trained: the file is a run's own config.yaml (`as_trained`)."""
    data = read_yaml(path) if path is not None else {}
    data = as_trained(data) if trained else data
    return validate_config(data, dict(parse_override(s) for s in sets), source=str(path or "--set"))


def dump_config(cfg: TrainConfig) -> str:
    """The full resolved config as YAML (reloads to an equal TrainConfig)."""
    return dump_yaml(cfg.model_dump(mode="json"))
