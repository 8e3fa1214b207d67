"""Optional experiment loggers (TensorBoard, Weights & Biases), imported only when a run enables them."""

from __future__ import annotations

import importlib
from pathlib import Path

MODULES = {"tensorboard": "torch.utils.tensorboard", "wandb": "wandb"}  # logger -> the module it writes with


def require(logger: str):
    """The module `logger` writes with; an ImportError naming the package to install where it is missing."""
    try:
        return importlib.import_module(MODULES[logger])
    except ImportError as e:
        raise ImportError(f"loggers.{logger} needs the {logger} package: pip install 'mecheval[loggers]' ({e})") from None


def check_loggers(flags: dict) -> None:
    """Every logger `flags` (a dumped LoggerConfig) enables can be imported: called before a run writes anything."""
    for logger in MODULES:
        if flags[logger]:
            require(logger)


def flatten(record: dict, prefix: str = "") -> dict[str, float]:
    """{"eval": {"test": {"acc": 1}}} -> {"eval/test/acc": 1} (numbers only)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return out


class TensorBoardLogger:
    def __init__(self, run_path: Path, config: dict) -> None:
        self.writer = require("tensorboard").SummaryWriter(log_dir=str(run_path / "tensorboard"))

    def log(self, record: dict) -> None:
        for name, value in flatten(record).items():
            if name != "step":
                self.writer.add_scalar(name, value, record["step"])

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, run_path: Path, config: dict) -> None:
        self.run = require("wandb").init(
            project=config["loggers"]["wandb_project"], name=run_path.name, dir=str(run_path), config=config, resume="allow"
        )

    def log(self, record: dict) -> None:
        self.run.log(flatten(record), step=record["step"])

    def close(self) -> None:
        self.run.finish()


def open_loggers(config: dict, run_path: Path) -> list:
    """The loggers that `config["loggers"]` (a dumped TrainConfig) enables; none by default."""
    flags = config["loggers"]
    return [cls(run_path, config) for key, cls in (("tensorboard", TensorBoardLogger), ("wandb", WandbLogger)) if flags[key]]
