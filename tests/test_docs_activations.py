"""docs/activations.md: every Python block runs, in order, in one namespace (from the repository root)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "activations.md"


@pytest.mark.skipif(not (ROOT / "results/cpu/quick").exists(), reason="the committed quick study is not in this checkout")
def test_the_page_runs(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) >= 5
    namespace: dict = {}
    for block in blocks:
        exec(compile(block.replace("/tmp/readout.png", str(tmp_path / "readout.png")), str(PAGE), "exec"), namespace)
    assert (tmp_path / "readout.png").stat().st_size > 1000
    assert namespace["verdict"].subset == "outside" and namespace["to_key"].shape == (64, 2)
    assert list(namespace["every"]["position"]) == sorted(namespace["every"]["position"])
