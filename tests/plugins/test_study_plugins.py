"""A study runs a plug-in mixer beside (or instead of) its architectures: `--archs` takes import paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from mecheval.study import STUDIES
from mecheval.sweeps.spec import SweepConfig, expand

ROOT = Path(__file__).parents[2]
MAMBA2 = "examples.mixers.mamba2:Mamba2"


@pytest.fixture(autouse=True)
def repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))


def test_archs_take_import_paths():
    sweep = STUDIES["ar-architectures"].sweep("cpu", archs=["attention", MAMBA2], lrs=[3e-3])
    runs = expand(SweepConfig.model_validate(sweep))
    mixers = {tuple(r.config.model.mixer) for r in runs}
    assert mixers == {("attention", "attention"), (MAMBA2, MAMBA2)}
    plugin = next(r for r in runs if r.config.model.mixer[0] == MAMBA2)
    assert plugin.config.model.d_conv == [4, 4] and plugin.config.model.d_model == 64  # its defaults, the study's width
    assert plugin.config.task.params == {"n_pairs": 4, "n_keys": 64, "n_values": 64}


def test_a_broken_plugin_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="mixer 'examples.mixers.mamba2:Mamba3': module .* has no 'Mamba3'"):
        STUDIES["quick"].sweep("cpu", archs=["examples.mixers.mamba2:Mamba3"])
    with pytest.raises(ValueError, match=r"has no architecture \['mamba3'\]"):
        STUDIES["quick"].sweep("cpu", archs=["mamba3"])
