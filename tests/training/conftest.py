import pytest

from mecheval.training import validate_config


@pytest.fixture
def tiny_config(tiny_run):
    """`tiny_config(**overrides)`: the suite's tiny AR run at lr 3e-3 (a 2-layer attention model) as a
    TrainConfig, with dotted overrides."""
    return lambda **overrides: validate_config({**tiny_run, "optim": {"lr": 3e-3}}, overrides)
