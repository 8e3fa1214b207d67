import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.training import ConfigError, TrainConfig, load_config, validate_config
from mecheval.training.config import config_diff, dump_config, parse_override

BASE = {
    "task": {"name": "ar", "params": {"n_pairs": 4, "n_keys": 16, "n_values": 16}},
    "model": {"d_model": 16},
    "steps": 10,
}


def test_vocab_size_comes_from_the_task():
    cfg = validate_config(BASE)
    assert cfg.model.vocab_size == 3 + 16 + 16
    assert validate_config(BASE, {"model.vocab_size": 64}).model.vocab_size == 64


def test_a_vocabulary_smaller_than_the_tasks_is_an_error():
    with pytest.raises(ConfigError, match="vocab_size"):
        validate_config(BASE, {"model.vocab_size": 10})


def test_published_defaults():
    cfg = validate_config(BASE)
    assert (cfg.optim.weight_decay, cfg.optim.warmup, cfg.optim.schedule) == (0.0, 0.1, "cosine")


@pytest.mark.parametrize(
    "override, field",
    [
        ("optim.lr=-1", "optim.lr"),
        ("optim.foo=1", "optim.foo"),
        ("steps=many", "steps"),
        ("model.mixer=nonsense", "model"),
        ("eval.every=0", "eval.every"),
        ("device=tpu", "device"),
        ("task.params.n_pairs=0", "task"),
    ],
)
def test_errors_name_the_field(tmp_path, override, field):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    with pytest.raises(ConfigError) as e:
        load_config(path, [override])
    assert field in str(e.value)


def test_overrides_are_yaml_values(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    cfg = load_config(path, ["optim.lr=3e-3", "model.mixer=[attention, attention]", "train_size=64", "bf16=true"])
    assert cfg.optim.lr == 3e-3 and cfg.model.mixer == ["attention", "attention"]
    assert cfg.train_size == 64 and cfg.bf16 is True
    assert parse_override("a.b=") == ("a.b", None)


@pytest.mark.parametrize("bad", ["no_equals", "=1", "steps.x=1"])
def test_malformed_overrides(tmp_path, bad):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    with pytest.raises(ConfigError):
        load_config(path, [bad])


def test_missing_or_non_mapping_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(tmp_path / "list.yaml")


@settings(max_examples=20, deadline=None)
@given(
    lr=st.floats(1e-6, 1.0),
    steps=st.integers(1, 10**6),
    d=st.sampled_from([16, 32, 64]),
    preset=st.sampled_from([None, "attention", "based"]),
    seed=st.integers(0, 2**31),
)
def test_dump_reload_roundtrip(lr, steps, d, preset, seed):
    over = {"optim.lr": lr, "steps": steps, "model.d_model": d, "seed": seed}
    if preset:
        over["model.preset"] = preset
    cfg = validate_config(BASE, over)
    again = TrainConfig.model_validate(yaml.safe_load(dump_config(cfg)))
    assert again == cfg and again.fingerprint() == cfg.fingerprint()


def test_fingerprint_ignores_device_and_resources_only():
    cfg = validate_config(BASE)
    assert validate_config(BASE, {"device": "cpu", "resources.num_cpus": 4}).fingerprint() == cfg.fingerprint()
    assert validate_config(BASE, {"seed": 1}).fingerprint() != cfg.fingerprint()
    assert validate_config(BASE, {"optim.lr": 2e-3}).fingerprint() != cfg.fingerprint()
    assert validate_config(BASE, {"train_order": "replay"}).fingerprint() != cfg.fingerprint()
    assert "train_order" not in cfg.identity()  # a later field at its default: earlier runs keep their fingerprint
    written = cfg.model_dump(mode="json")
    assert config_diff(written, cfg) == [] and config_diff({k: v for k, v in written.items() if k != "train_order"}, cfg) == []


@pytest.mark.parametrize("field,value", [("model.norm_eps", 1e-5), ("model.final_norm_bias", True)])
def test_model_fields_added_later_keep_earlier_fingerprints(field, value):
    """A config written before a model field existed is the same run as one with the field at its default."""
    cfg = validate_config(BASE, {"model.final_norm": "layernorm"})
    name = field.split(".")[1]
    assert name not in cfg.identity()["model"]
    written = cfg.model_dump(mode="json")
    older = {**written, "model": {k: v for k, v in written["model"].items() if k != name}}
    assert config_diff(older, cfg) == []
    changed = validate_config(BASE, {"model.final_norm": "layernorm", field: value})
    assert changed.fingerprint() != cfg.fingerprint()
    assert config_diff(older, changed) == [f"{field}: run has '(absent)', given {value!r}"]
