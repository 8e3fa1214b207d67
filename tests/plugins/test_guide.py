"""docs/your-architecture.md stays true: its mixer passes check-mixer and its config loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mecheval.models.conformance import check_mixer
from mecheval.training import load_config

GUIDE = (Path(__file__).parents[2] / "docs" / "your-architecture.md").read_text()
PATH = "mylab.retention:Retention"


def block(lang: str) -> str:
    """The first ```lang block of the guide."""
    return re.search(rf"```{lang}\n(.*?)```", GUIDE, re.S)[1]


@pytest.fixture
def guide_module(tmp_path, monkeypatch):
    """The guide's mixer as module `guide_retention` (`mylab` is another test's package)."""
    (tmp_path / "guide_retention.py").write_text(block("python"))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "guide_retention:Retention"


def test_the_guides_mixer_passes_check_mixer(guide_module):
    checks = check_mixer(guide_module, learn=False)
    assert [(c.name, c.status) for c in checks if c.status != "pass"] == [("learns", "skip")]


def test_the_guides_config_loads_with_its_options(guide_module, tmp_path):
    config = tmp_path / "retention.yaml"
    config.write_text(block("yaml").replace(PATH, guide_module))
    cfg = load_config(config, [])
    assert cfg.model.mixer == [guide_module] * cfg.model.n_layers and cfg.model.d_conv == [4] * cfg.model.n_layers
    assert cfg.model.mixer_options(guide_module).gamma == 0.95


def test_every_command_of_the_guide_trusts_its_plugin():
    """Run from a fresh directory beside `mylab/`, each command imports the plug-in only with --trust-plugins."""
    commands = re.findall(r"^\$ (mecheval .*)$", GUIDE, re.M)
    assert len(commands) >= 4
    assert [c for c in commands if not c.startswith("mecheval --trust-plugins ")] == []
