"""make_task: names, validation with clear errors, params that rebuild the task."""

import pytest
import torch
from pydantic import ValidationError

from mecheval.tasks import make_task


@pytest.mark.parametrize(
    "name, params, message",
    [
        ("nope", {}, "unknown task 'nope'"),
        ("ar", {"n_pairs": 0}, "n_pairs"),
        ("ar", {"n_pairs": 20, "n_keys": 16}, "n_keys >= n_pairs"),
        ("ar", {"n_pair": 3}, "n_pair"),
        ("mqar", {"seq_len": 16, "n_pairs": 8}, "query slots"),
        ("atr", {"grammar": "hard"}, "grammar"),
        ("atr", {"holdout_frac": 1.0}, "holdout_frac"),
        ("atr", {"max_lenght": 10}, "max_lenght"),
    ],
)
def test_invalid_parameters_name_the_problem(name, params, message):
    with pytest.raises(ValueError, match=message):
        make_task(name, **params)


def test_validation_errors_are_pydantic():
    with pytest.raises(ValidationError):
        make_task("ar", n_pairs=-1)


@pytest.mark.parametrize(
    "name, params",
    [("ar", {"n_pairs": 8, "n_keys": 64, "n_values": 64}), ("mqar", {"n_pairs": 4}), ("atr", {"holdout_frac": 0.2})],
)
def test_params_rebuild_the_task(name, params):
    task = make_task(name, **params)
    again = make_task(task.name, **task.params.model_dump())
    assert again.params == task.params
    assert torch.equal(task.sample(8, seed=1).tokens, again.sample(8, seed=1).tokens)


def test_unknown_split():
    with pytest.raises(ValueError, match="heldout"):
        make_task("atr").sample(4, seed=0, split="heldout")  # no held-out pairs without holdout_frac
