"""The readouts as a value (`readout.compute_readout`) are the tables and the verdict the run-directory pipeline
(`runs.intervene_run`) writes, on the committed trained quick-study Mamba (a short conv, a recurrent state, a
direct retrieval the pointer control reads)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from mecheval.interventions.accuracy import EXAMPLES
from mecheval.interventions.readout import compute_readout
from mecheval.interventions.runs import intervene_run
from mecheval.interventions.spec import ReadoutSpec
from mecheval.interventions.terms import TERMS

QUICK_MAMBA = Path(__file__).parents[2] / "results/cpu/quick/runs/preset-mamba_lr-0.003_seed-0"
pytestmark = pytest.mark.skipif(not QUICK_MAMBA.exists(), reason="the committed quick study is not in this checkout")
FILES = {"interventions": "interventions.parquet", "accuracy": "accuracy.parquet", "examples": EXAMPLES,
         "conv_window": "conv_window.parquet", "conv_ablation": "conv_ablation.parquet",
         "carriers": "carriers.parquet", "pointer": "pointer.parquet", "state_curve": "state_curve.parquet"}


def test_the_core_returns_the_tables_the_pipeline_writes(tmp_path):
    from mecheval import load_run
    from mecheval.training.prompts import run_training_ids

    spec = ReadoutSpec(n=64, sites=["resid_pre", "conv_out"], analyses=["conv-window", "state", *TERMS])
    notes = []
    df, verdict = intervene_run(QUICK_MAMBA, spec, out=tmp_path, on_note=notes.append)
    lm, task, cfg = load_run(QUICK_MAMBA)
    core = []
    readout = compute_readout(lm, task, spec, run_training_ids(QUICK_MAMBA, cfg), on_note=core.append)

    assert notes == [f"{tmp_path.name}: {note}" for note in core] and len(core) == len(TERMS)  # Mamba has none of them
    assert readout.terms == {} and not any((tmp_path / term.file).exists() for term in TERMS.values())
    for field, name in FILES.items():
        table = getattr(readout, field)
        if table is not None:  # every table the pipeline writes, as the core returns it
            pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / name), table, check_exact=True)
    assert {f for f, name in FILES.items() if (tmp_path / name).exists()} == set(FILES)
    pd.testing.assert_frame_equal(df, readout.interventions, check_exact=True)
    assert verdict == readout.verdict and verdict.label == "direct retrieval"
    written = json.loads((tmp_path / "verdict.json").read_text())
    assert written["verdict"] == readout.verdict.label and written["n_examples"] == readout.prompts["n_examples"] == 64
    assert all(written[k] == v for k, v in readout.prompts.items())
    assert (tmp_path / "interventions" / "state_curve.png").exists() and (tmp_path / "interventions" / "key_profile.png").exists()


def test_a_run_read_into_another_directory_is_held_by_a_readers_lock(tmp_path):
    """Reading a run into another directory takes the run's reader lock: another reader beside it is fine (two
    readouts of one committed run at once, as tests and users run them), its writer is not (one line). On a copy:
    the committed run may be read by another test meanwhile, whose reader lock would refuse this test's writer."""
    import shutil

    from mecheval.training.lock import DirLock, LockedError

    run = shutil.copytree(QUICK_MAMBA, tmp_path / "run", ignore=shutil.ignore_patterns(".lock"))
    spec = ReadoutSpec(n=16, sites=["resid_pre"], analyses=[])
    with DirLock(run, "run directory", shared=True):
        _, verdict = intervene_run(run, spec, out=tmp_path / "a")
    assert (tmp_path / "a" / "verdict.json").exists() and verdict is not None
    with DirLock(run, "run directory"), pytest.raises(LockedError, match="in use by pid"):
        intervene_run(run, spec, out=tmp_path / "b")
    assert not (tmp_path / "b" / "verdict.json").exists()


def test_a_readout_that_keeps_an_analysis_keeps_its_figure_drawn_from_the_kept_table(tmp_path):
    """A committed run keeps its tables, not its per-run PNGs; read again without its conv-window and state
    analyses (`relabel --repatch --keep state,conv-window`), their figures are drawn again from the kept tables
    (the study report shows them), the tables untouched."""
    import shutil

    run = shutil.copytree(QUICK_MAMBA, tmp_path / "run", ignore=shutil.ignore_patterns(".lock", "*.png"))
    tables = {name: (run / name).read_bytes() for name in ("state_curve.parquet", "conv_window.parquet")}
    intervene_run(run, ReadoutSpec(n=64, sites=["resid_pre"]), replace=True)
    for figure in ("state_curve.png", "conv_window.png"):
        assert (run / "interventions" / figure).stat().st_size > 1000
    assert {name: (run / name).read_bytes() for name in tables} == tables
