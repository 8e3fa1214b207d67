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


GATED = Path(__file__).parents[2] / "results/cpu/modern-gated-deltanet"


@pytest.mark.skipif(not GATED.exists(), reason="the committed modern Gated DeltaNet study is not in this checkout")
def test_a_report_rebuilt_from_a_clone_keeps_the_readout_figures_its_runs_do_not_keep(tmp_path):
    """Committed runs keep no readout PNGs (a figure is committed once, in the study's figures/): a rebuilt report
    takes each from the figure the earlier build copied, of the right architecture where one's name extends
    another's ("gated-deltanet" and "gated-deltanet (d_conv 0)"), and removes none."""
    from mecheval.report import build_report

    study = tmp_path / "modern-gated-deltanet"
    shutil.copytree(GATED, study, ignore=shutil.ignore_patterns("report.html", ".lock"))
    assert not list(study.glob("runs/*/interventions/*.png"))
    before = {p.name: p.read_bytes() for p in (study / "figures").glob("*.png")}
    build_report(study)
    after = {p.name: p.read_bytes() for p in (study / "figures").glob("*.png")}
    assert set(after) == set(before)
    readouts = [n for n in before if n.startswith(("heatmap_", "profile_", "conv_window_", "state_"))]
    assert len(readouts) == 8 and all(after[n] == before[n] for n in readouts)
    md = (study / "report.md").read_text()
    assert "![heatmap gated-deltanet (d_conv 0) resid_post](figures/heatmap_gated-deltanet_d_conv_0_resid_post.png)" in md
    assert "key corrupted; clean resid_post patched in" in md
