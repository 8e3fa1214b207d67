"""Plug-ins by import path: mixers and tasks loaded from modules outside the package, contracts checked at load."""

from __future__ import annotations

import itertools
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from mecheval.models import ModelConfig, build_model
from mecheval.models.mixers import MIXERS, ZOO, mixer_label, mixer_spec
from mecheval.plugins import TRUST_ENV, PluginError, load
from mecheval.tasks import make_task
from mecheval.tasks.registry import TASKS, ZOO as TASK_ZOO, task_class

_ids = itertools.count()

GOOD_MIXER = '''
import torch
from torch import nn
from mecheval.models.mixers import Mixer, MixerOptions
from mecheval.models.sites import Site


class Opts(MixerOptions):
    scale: float = 1.0


class CumMean(Mixer):
    """y_t = W mean_{s <= t} x_s."""
    has_conv = False
    Options = Opts
    default_norm = "rmsnorm"
    default_mlp = False

    def __init__(self, d_model, conv, options, layer_idx, max_len):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.core_out = Site()
        self.scale = options.scale

    def forward(self, x):
        n = torch.arange(1, x.shape[1] + 1, dtype=x.dtype)[:, None]
        return self.proj(self.core_out(self.scale * x.cumsum(1) / n))
'''


def write_module(tmp_path, monkeypatch, source: str) -> str:
    """A fresh module (unique name) holding `source`, importable; -> its module name."""
    name = f"plugin_mod_{next(_ids)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_the_zoo_is_registered_by_import_path():
    assert set(MIXERS) == set(ZOO) and set(TASKS) == set(TASK_ZOO)
    for name, path in ZOO.items():
        assert load(path, "mixer") is MIXERS[name]
        assert mixer_spec(name) is MIXERS[name]


def test_a_mixer_by_import_path_builds_with_its_defaults_and_options(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2]))  # for examples/
    path = write_module(tmp_path, monkeypatch, GOOD_MIXER) + ":CumMean"
    cfg = ModelConfig(vocab_size=11, d_model=8, mixer=["attention", path], options={path: {"scale": 2.0}})
    assert cfg.norm == ["layernorm", "rmsnorm"] and cfg.mlp == [True, False] and cfg.d_conv == [0, 0]
    assert cfg.pos_emb == "learned"  # attention asks for positions
    lm = build_model(cfg)
    assert lm.layers[1].mixer.scale == 2.0
    assert "layers.1.core_out" in lm.sites()
    assert lm(torch.zeros(2, 5, dtype=torch.long)).shape == (2, 5, 11)
    assert mixer_label(path) == "cummean" and mixer_label("mamba") == "mamba"
    assert mixer_label("examples.mixers.sliding_window:SlidingWindowAttention") == "sliding-window"  # its label
    assert not mixer_spec(path).has_recurrent and MIXERS["mamba"].has_recurrent


def test_a_plugin_without_positions_gets_none(tmp_path, monkeypatch):
    path = write_module(tmp_path, monkeypatch, GOOD_MIXER) + ":CumMean"
    assert ModelConfig(vocab_size=11, mixer=path).pos_emb == "none"


def test_modules_in_the_current_directory_are_found_only_when_trusted(tmp_path, monkeypatch):
    (tmp_path / "cwd_plugin_mixers.py").write_text(GOOD_MIXER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", *sys.path])  # as `python -c` has it; the loader adds the directory if trusted
    monkeypatch.delenv(TRUST_ENV, raising=False)
    with pytest.raises(ValueError, match="cannot import 'cwd_plugin_mixers'.*--trust-plugins"):
        ModelConfig(vocab_size=5, n_layers=1, mixer="cwd_plugin_mixers:CumMean")
    monkeypatch.setenv(TRUST_ENV, "1")
    cfg = ModelConfig(vocab_size=5, n_layers=1, mixer="cwd_plugin_mixers:CumMean")
    assert cfg.mixer == ["cwd_plugin_mixers:CumMean"] and str(tmp_path) in sys.path


@pytest.mark.parametrize(
    "source, attr, message",
    [
        ("x = 1", "Nope", "module '.*' has no 'Nope'"),
        ("from torch import nn\nclass M(nn.Module): pass", "M", "expected a subclass of mecheval.models.mixers.Mixer"),
        ("from mecheval.models.mixers import Mixer\nclass M(Mixer): pass", "M", r"forward\(x \[B, T, D\]\)"),
        (
            "from mecheval.models.mixers import Mixer\n"
            "class M(Mixer):\n    def forward(self, x): return x\n    def step(self, x, s): return x, s",
            "M", "the recurrent form needs both init_state and step",
        ),
        (
            "from mecheval.models.mixers import Mixer\n"
            "class M(Mixer):\n    has_conv = False\n    default_conv = 4\n    def forward(self, x): return x",
            "M", "default_conv is 4 but has_conv is False",
        ),
        (
            "from mecheval.models.mixers import Mixer\n"
            "class M(Mixer):\n    Options = dict\n    default_norm = 'batchnorm'\n    def forward(self, x): return x",
            "M", "Options must subclass MixerOptions.*default_norm must be one of",
        ),
    ],
)
def test_a_broken_mixer_is_refused_at_load_naming_what_is_missing(tmp_path, monkeypatch, source, attr, message):
    path = f"{write_module(tmp_path, monkeypatch, source)}:{attr}"
    with pytest.raises(ValueError, match=f"mixer '{path}': {message}"):
        ModelConfig(vocab_size=5, mixer=path)


@pytest.mark.parametrize("name, message", [
    ("no_such_module_xyz:M", "cannot import 'no_such_module_xyz'"),
    ("transformer", "unknown mixer 'transformer'"),
    (":M", "expected an import path"),
])
def test_unknown_mixers_are_named(name, message):
    with pytest.raises(PluginError, match=message):
        mixer_spec(name)


TASK = '''
from mecheval.tasks.ar import ARTask


class Shifted(ARTask):
    """AR under another name (a plug-in task reusing the zoo's machinery)."""
    name = "shifted-ar"
'''


def test_a_task_by_import_path(tmp_path, monkeypatch):
    path = write_module(tmp_path, monkeypatch, TASK) + ":Shifted"
    task = make_task(path, n_pairs=2, n_keys=8, n_values=8)
    assert task.name == "shifted-ar" and task.vocab_size == 3 + 16
    batch = task.sample(4, seed=0)
    assert batch.tokens.shape == (4, 9)
    assert (task.corrupt(batch, "key", seed=0).tokens != batch.tokens).sum() == 4


def test_a_broken_task_names_every_missing_member(tmp_path, monkeypatch):
    src = "from mecheval.tasks import Task\nclass T(Task):\n    def decode(self, tokens): return []\n"
    path = write_module(tmp_path, monkeypatch, src) + ":T"
    with pytest.raises(PluginError) as e:
        task_class(path)
    msg = str(e.value)
    assert msg.startswith(f"task '{path}': ") and "\n" not in msg
    for missing in ("corrupt", "sample", "special_tokens", "vocab_size", "class attribute name", "Params"):
        assert missing in msg
    assert "decode" not in msg
