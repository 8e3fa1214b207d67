"""`mecheval report` on a folder of `mecheval train` runs, and reports that follow the architectures run
(the committed quick study's runs, copied)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mecheval.cli import app

QUICK = Path(__file__).parents[2] / "results/cpu/quick"
pytestmark = pytest.mark.skipif(not QUICK.exists(), reason="the committed quick study is not in this checkout")
KEEP = ("config.yaml", "model.safetensors", "summary.json", "verdict.json", "accuracy.parquet", "interventions.parquet")


def copy_run(name: str, to: Path) -> None:
    to.mkdir(parents=True)
    for f in KEEP:
        shutil.copy(QUICK / "runs" / name / f, to / f)


def test_report_on_a_folder_of_train_runs(tmp_path):
    folder = tmp_path / "my-runs"
    copy_run("preset-attention_lr-0.003_seed-0", folder / "attention")
    copy_run("d_conv-0_preset-mamba_lr-0.003_seed-0", folder / "mamba-noconv")
    result = CliRunner().invoke(app, ["report", str(folder)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    md = (folder / "report.md").read_text()
    assert md.startswith("# mecheval runs: my-runs") and "Architectures: attention vs mamba (d_conv 0)." in md
    assert "Attention vs Mamba" not in md and (folder / "report.html").exists()


def test_a_study_restricted_by_archs_reports_only_what_ran(tmp_path):
    study = tmp_path / "quick-attention"
    for seed in (0, 1):
        copy_run(f"preset-attention_lr-0.003_seed-{seed}", study / "runs" / f"preset-attention_lr-0.003_seed-{seed}")
    meta = json.loads((QUICK / "study.json").read_text()) | {"archs": ["attention"]}
    (study / "study.json").write_text(json.dumps(meta))
    assert CliRunner().invoke(app, ["report", str(study)]).exit_code == 0
    md = (study / "report.md").read_text()
    assert "Attention vs Mamba" not in md and "quick restricted to the architectures run. Architectures: attention." in md
    assert "not run" not in md and "3 finding(s) about architectures not in this study are left out" in md
    assert "Attention reaches high AR accuracy by induction" in md
