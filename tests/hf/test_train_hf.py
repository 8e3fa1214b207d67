"""transformers models trained here: a model config naming a transformers class (`model: {hf: …}`) through
`mecheval train`, `load_run`, `intervene`, and `study --archs`."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from mecheval import load_run
from mecheval.cli import app
from mecheval.hf import HFLM
from mecheval.store.identity import arch_parts
from mecheval.study.presets import STUDIES
from mecheval.sweeps.spec import SweepConfig, expand
from mecheval.training.config import TrainConfig, format_validation_error

tr = pytest.importorskip("transformers")  # the optional extra `hf`: these tests skip without it

TASK = {"name": "ar", "params": {"n_pairs": 4, "n_keys": 16, "n_values": 16}}


def test_a_train_config_builds_the_named_class_at_mechevals_width_and_depth():
    cfg = TrainConfig.model_validate({"task": TASK, "steps": 1, "model": {"hf": "MambaForCausalLM", "d_model": 32, "config": {"state_size": 4}}})
    assert (cfg.model.vocab_size, cfg.model.d_model, cfg.model.n_layers) == (35, 32, 2)
    from mecheval.models import build_model

    lm = build_model(cfg.model)
    assert isinstance(lm, HFLM) and type(lm.model).__name__ == "MambaForCausalLM"
    c = lm.model.config
    assert (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.state_size) == (35, 32, 2, 4)
    assert "layers.1.state" in lm.sites()


def test_the_classes_special_ids_outside_the_tasks_vocabulary_are_unset(caplog):
    from mecheval.models import build_model

    cfg = TrainConfig.model_validate({"task": TASK, "steps": 1, "model": {"hf": "GPT2LMHeadModel", "d_model": 16,
                                                                          "config": {"n_head": 1, "eos_token_id": 3}}})
    with caplog.at_level("WARNING"):
        c = build_model(cfg.model).model.config
    assert (c.bos_token_id, c.eos_token_id) == (None, 3)  # GPT-2's 50256 unset; one the config names kept
    assert "bos_token_id" not in caplog.text


@pytest.mark.parametrize("model, message", [
    ({"hf": "NoSuchForCausalLM"}, "model.hf 'NoSuchForCausalLM': transformers has no such class"),
    ({"hf": "MambaForCausalLM", "config": {"hidden_size": 8}}, "model: Value error, config: ['hidden_size'] are set by model.vocab_size / d_model / n_layers"),
    ({"hf": "MambaForCausalLM", "d_model": 0}, "model.d_model: Input should be greater than 0"),
])
def test_bad_hf_model_configs_name_the_field(model, message):
    with pytest.raises(ValueError) as e:
        TrainConfig.model_validate({"task": TASK, "steps": 1, "model": model})
    assert message in (format_validation_error(e.value) if hasattr(e.value, "errors") else str(e.value))


def test_zoo_model_errors_keep_their_field_names():
    with pytest.raises(ValueError) as e:
        TrainConfig.model_validate({"task": TASK, "steps": 1, "model": {"d_model": "wide"}})
    assert format_validation_error(e.value).startswith("model.d_model: ")


def test_mecheval_train_then_intervene_on_a_transformers_mamba(tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({"task": TASK, "model": {"hf": "MambaForCausalLM", "d_model": 32, "config": {"state_size": 8}},
                                      "steps": 30, "batch_size": 16, "eval": {"every": 15, "size": 64}, "checkpoint_every": 15}))
    r = CliRunner().invoke(app, ["train", str(config), "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    lm, task, cfg = load_run(tmp_path / "run")
    assert isinstance(lm, HFLM) and cfg.model.hf == "MambaForCausalLM"
    batch = task.sample(4, seed=0)
    fresh = HFLM(tr.MambaForCausalLM(tr.MambaConfig(**cfg.model.transformers_config()))).eval()
    with torch.no_grad():
        assert not torch.allclose(lm(batch.tokens), fresh(batch.tokens))  # the trained weights were loaded
    r = CliRunner().invoke(app, ["intervene", str(tmp_path / "run"), "--n", "32", "--sites", "resid_pre", "--sites", "state"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "run" / "interventions.parquet")
    assert set(df["site"]) >= {"resid_pre", "state"}


def test_study_archs_take_transformers_models():
    sweep = STUDIES["quick"].sweep("cpu", archs=["attention", "transformers:MambaForCausalLM", "mecheval.hf.models:GPT2"], seeds=[0])
    runs = expand(SweepConfig.model_validate(sweep))
    hf = [r.config.model for r in runs if getattr(r.config.model, "hf", None)]
    assert [m.hf for m in hf] == ["transformers:MambaForCausalLM", "GPT2LMHeadModel"]
    assert all(m.d_model == 64 for m in hf) and hf[1].config["n_head"] == 1
    assert arch_parts(pd.Series({"model.hf": "transformers:MambaForCausalLM"})) == ("hf:MambaForCausalLM", None)


def test_best_lr_groups_zoo_and_transformers_runs_whose_fields_are_missing():
    """A study mixing both has NaN in the other kind's config columns (pandas 3 keeps NaN through astype(str))."""
    from mecheval.sweeps.table import best_lr

    nan = float("nan")
    df = pd.DataFrame({"name": list("abcd"), "status": ["done"] * 4, "model.preset": ["mamba", "mamba", nan, nan],
                       "model.hf": [nan, nan, "MambaForCausalLM", "MambaForCausalLM"], "optim.lr": [1e-3, 3e-3] * 2,
                       "summary.final.test.acc": [0.2, 0.9, 0.8, 0.1]})
    assert sorted(best_lr(df)["name"]) == ["b", "c"]  # the best learning rate of each


def test_without_transformers_an_hf_model_config_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # as if the extra were not installed
    with pytest.raises(ValueError) as e:
        TrainConfig.model_validate({"task": TASK, "steps": 1, "model": {"hf": "MambaForCausalLM"}})
    assert "model.hf 'MambaForCausalLM' needs transformers: pip install 'mecheval[hf]'" in format_validation_error(e.value)
