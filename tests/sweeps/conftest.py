import pytest

BASE = {
    "task": {"name": "ar", "params": {"n_pairs": 4, "n_keys": 16, "n_values": 16}},
    "model": {"d_model": 16, "max_len": 16},
    "steps": 24,
    "batch_size": 16,
    "log_every": 4,
    "checkpoint_every": 8,
    "eval": {"every": 12, "size": 32},
    "device": "cpu",
}


@pytest.fixture
def base():
    """A tiny AR run (4 pairs, 16 + 16 tokens, d=16, 24 steps) as plain data."""
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as in every sweep worker (so in-process references are bitwise comparable)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
