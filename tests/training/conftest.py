import pytest

from mecheval.training import TrainConfig, validate_config


def tiny(**overrides) -> TrainConfig:
    """AR with 4 pairs over 16 + 16 tokens, a 2-layer d=16 attention model, a few dozen steps."""
    base = {
        "task": {"name": "ar", "params": {"n_pairs": 4, "n_keys": 16, "n_values": 16}},
        "model": {"d_model": 16, "max_len": 16},
        "steps": 24,
        "batch_size": 16,
        "log_every": 4,
        "checkpoint_every": 8,
        "eval": {"every": 12, "size": 32},
        "optim": {"lr": 3e-3},
        "device": "cpu",
    }
    return validate_config(base, overrides)


@pytest.fixture
def tiny_config():
    return tiny


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: on a loaded 2-core machine, more threads spin against each other (30x slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
