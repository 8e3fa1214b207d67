"""Training runs: `TrainConfig` -> `train(config, run_dir)` -> a run directory; `load_run` reads it back."""

from mecheval.training.config import ConfigError, TrainConfig, load_config, validate_config
from mecheval.training.run_dir import RunDir, load_run
from mecheval.training.trainer import RunExistsError, train

__all__ = ["ConfigError", "RunDir", "RunExistsError", "TrainConfig", "load_config", "load_run", "train", "validate_config"]
