"""The example configs in examples/ stay valid as the config schema evolves."""

from pathlib import Path

from mecheval.sweeps import expand, load_sweep
from mecheval.training import load_config

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_train_example_is_valid():
    cfg = load_config(EXAMPLES / "train_ar_attention.yaml")
    assert cfg.model.mixer == ["attention", "attention"] and cfg.model.pos_emb == "learned"
    assert cfg.model.vocab_size == 3 + 64 + 64  # PAD, BOS, EOS + keys + values, filled in from the task


def test_sweep_example_expands_to_the_grid():
    runs = expand(load_sweep(EXAMPLES / "sweep_ar_mamba_conv.yaml"))
    assert len(runs) == 4 * 2 * 2
    assert {r.config.model.d_conv[0] for r in runs} == {0, 1, 2, 4}
    assert all(r.config.model.mixer == ["mamba", "mamba"] for r in runs)


def test_eight_pair_example_lists_its_three_mixers_on_the_harder_task():
    runs = expand(load_sweep(EXAMPLES / "sweep_ar_8pairs.yaml"))
    assert sorted(r.config.model.preset for r in runs) == ["h3", "hyena", "mamba"]
    assert all(r.config.task.params["n_pairs"] == 8 and r.config.steps == 6000 for r in runs)
    assert {r.config.model.preset: r.config.optim.lr for r in runs}["h3"] == 0.001
