"""Training runs: `TrainConfig` -> `train(config, run_dir)` -> a run directory; `load_run` reads it back;
`train_cohort` trains runs that differ only in seed, learning rate and weight decay as one job."""

from mecheval.training.config import ConfigError, TrainConfig, load_config, validate_config
from mecheval.training.run_dir import RunDir, load_run
from mecheval.training.trainer import RunExistsError, train
from mecheval.training.cohort import train_cohort

__all__ = ["ConfigError", "RunDir", "RunExistsError", "TrainConfig", "load_config", "load_run", "train", "train_cohort", "validate_config"]
