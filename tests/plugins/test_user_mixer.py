"""A mixer from a package outside mecheval (its `Site` two modules below the mixer), trained from a YAML
config and intervened on through the CLI with its sites named, run from the user's directory."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.plugins import TRUST_ENV

MYLAB = Path(__file__).parent / "modules" / "mylab"

CONFIG = """\
task: {name: ar, params: {n_pairs: 2, n_keys: 8, n_values: 8}}
model:
  mixer: mylab.mixers:GatedCumMean
  d_model: 16
  max_len: 16
steps: 30
batch_size: 16
eval: {every: 30, size: 32}
checkpoint_every: 30
"""


def test_a_user_mixer_trains_from_yaml_and_is_intervened_on_by_site_name(tmp_path, monkeypatch):
    shutil.copytree(MYLAB, tmp_path / "mylab")  # the user's project: mylab/ beside the config
    (tmp_path / "train.yaml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader adds the current directory (trusted)
    monkeypatch.setenv(TRUST_ENV, "0")  # restored after --trust-plugins sets it
    runner = CliRunner()

    trained = runner.invoke(app, ["--trust-plugins", "train", "train.yaml", "--out", "run", "--quiet"])
    assert trained.exit_code == 0, trained.output
    config = (tmp_path / "run" / "config.yaml").read_text()
    assert "mylab.mixers:GatedCumMean" in config and "d_conv:\n  - 2\n  - 2" in config  # the class's default

    result = runner.invoke(app, ["intervene", "run", "--n", "32", "--sites", "gate_out", "--sites", "resid_pre"])
    assert result.exit_code == 0, result.output
    df = pd.read_parquet(tmp_path / "run" / "interventions.parquet")
    assert {"gate_out", "resid_pre"} <= set(df["site"])
    assert set(df.loc[df["site"] == "gate_out", "layer"]) == {0, 1}
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["verdict"]

    unknown = runner.invoke(app, ["intervene", "run", "--n", "32", "--sites", "gate_in"])
    assert unknown.exit_code != 0 and "layers.0.gate_out" in unknown.output  # known sites are listed by name
