import pytest
import yaml

from mecheval.sweeps import SweepConfig, expand, load_sweep
from mecheval.sweeps.spec import run_name
from mecheval.training import ConfigError


def test_grid_times_list(base):
    sweep = SweepConfig(base=base, grid={"model.mixer": ["attention"], "optim.lr": [1e-3, 3e-3]},
                        list=[{"model.d_model": 16}, {"model.d_model": 32, "batch_size": 8}])
    runs = expand(sweep)
    assert len(runs) == 4
    assert [r.name for r in runs] == [
        "d_model-16_mixer-attention_lr-0.001",
        "d_model-16_mixer-attention_lr-0.003",
        "batch_size-8_d_model-32_mixer-attention_lr-0.001",
        "batch_size-8_d_model-32_mixer-attention_lr-0.003",
    ]
    assert [(r.config.model.d_model, r.config.batch_size, r.config.optim.lr) for r in runs] == [
        (16, 16, 1e-3), (16, 16, 3e-3), (32, 8, 1e-3), (32, 8, 3e-3)]
    assert [r.name for r in expand(sweep)] == [r.name for r in runs]  # stable


def test_names_disambiguate_and_sanitise():
    keys = ["model.d_conv", "model.mixer", "model.options.mamba.d_conv"]
    name = run_name({"model.d_conv": [3, "long"], "model.options.mamba.d_conv": 4, "model.mixer": "a/b c"}, keys)
    assert name == "model.d_conv-3+long_mixer-a_b_c_model.options.mamba.d_conv-4"
    assert run_name({}, []) == "run"
    assert run_name({"optim.lr": "1e-3"}, ["optim.lr"]) == run_name({"optim.lr": 0.001}, ["optim.lr"]) == "lr-0.001"


def test_names_do_not_depend_on_key_order(base):
    a = SweepConfig(base=base, grid={"seed": [0, 1], "optim.lr": [1e-3]})
    b = SweepConfig(base=base, grid={"optim.lr": [1e-3], "seed": [0, 1]})
    assert [r.name for r in expand(a)] == [r.name for r in expand(b)] == ["lr-0.001_seed-0", "lr-0.001_seed-1"]


def test_colliding_names_are_an_error(base):
    with pytest.raises(ConfigError, match="same name"):
        expand(SweepConfig(base=base, grid={"optim.lr": [0.001, 1e-3]}))


def test_an_invalid_run_names_run_and_field(base):
    with pytest.raises(ConfigError, match=r"run lr--1(.|\n)*optim.lr"):
        expand(SweepConfig(base=base, grid={"optim.lr": [1e-3, -1]}))
    with pytest.raises(ConfigError, match="no values"):
        expand(SweepConfig(base=base, grid={"optim.lr": []}))


def test_load_sweep_with_a_base_file(tmp_path, base):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "grid": {"seed": [0, 1]}}))
    assert [r.config.seed for r in expand(load_sweep(tmp_path / "s.yaml"))] == [0, 1]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"base": base, "grids": {}}))
    with pytest.raises(ConfigError, match="grids"):
        load_sweep(tmp_path / "bad.yaml")
