"""The results store: each file read once per process (read again once rewritten), a run made by a sweep
records its architecture, variant and comparison group in run.json, and a run made without one (every run
committed before run.json) reads as before."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from mecheval.report.analyse import analyse, load
from mecheval.report.results import study_table
from mecheval.store import files, identity, runs
from mecheval.sweeps import SweepConfig, run_sweep
from mecheval.sweeps.table import GROUP, best_lr, collect
from mecheval.common import flatten

QUICK = Path(__file__).resolve().parents[2] / "results" / "cpu" / "quick"


@pytest.fixture
def quick(tmp_path) -> Path:
    if not QUICK.exists():
        pytest.skip("the committed quick study is not in this checkout")
    return Path(shutil.copytree(QUICK, tmp_path / "quick", ignore=shutil.ignore_patterns("*.safetensors")))


def test_a_report_reads_each_file_of_the_study_once(quick):
    files.forget()
    analyse(load(quick))
    read = dict(files.READS)
    assert read and set(read.values()) == {1}  # config.yaml read by the runs' table and for the chance level: once
    assert {p.name for p in read} >= {"study.json", "sweep.yaml", "config.yaml", "summary.json", "verdict.json",
                                      "accuracy.parquet", "examples.parquet"}
    analyse(load(quick))
    assert dict(files.READS) == read  # a second report reads nothing from disk


def test_a_rewritten_file_is_read_again_and_callers_get_their_own_copy(quick):
    run = next((quick / "runs").iterdir())
    first = runs.summary(run)
    first["steps"] = -1  # a caller's change is its own
    assert runs.summary(run)["steps"] != -1
    (run / "summary.json").write_text(json.dumps({**runs.summary(run), "steps": 7}))
    assert runs.summary(run)["steps"] == 7


def test_a_run_made_by_a_sweep_records_its_identity(tmp_path, tiny_run):
    tiny_run["model"] = {"preset": "mamba", "d_model": 16, "d_conv": 0}
    spec = SweepConfig.model_validate({"base": tiny_run, "grid": {"optim.lr": [1e-3, 1e-2], "seed": [0, 1]}})
    run_sweep(spec, tmp_path, workers=1)
    for run in (tmp_path / "runs").iterdir():
        recorded = identity.recorded(run)
        assert (recorded.arch, recorded.arch_name, recorded.arch_conv) == ("mamba (d_conv 0)", "mamba", 0)
        assert (recorded.layers, recorded.positions) == (None, None)
        assert identity.derive(flatten(runs.config(run))) == dataclasses.replace(recorded, group=None)
    table = collect(tmp_path)
    assert table[GROUP].nunique() == 1  # lr and seed apart, one design
    derived = best_lr(table.drop(columns=[GROUP]))  # the groups derived as for runs committed without run.json
    assert list(best_lr(table)["name"]) == list(derived["name"])
    assert set(study_table(tmp_path)["arch"]) == {"mamba (d_conv 0)"}


def test_a_run_without_run_json_reads_as_derived(quick):
    assert not list(quick.glob(f"runs/*/{identity.RUN_JSON}"))  # committed before run.json
    table = study_table(quick)
    assert sorted(set(table["arch"])) == ["attention", "mamba", "mamba (d_conv 0)"]
    assert GROUP not in collect(quick) and table["best_lr"].all()


def test_a_run_trained_with_a_term_ablated_is_named_by_the_ablation(tmp_path, tiny_run):
    """Mamba-3 trained without its two-token term is `mamba3 (no two-token)`, recorded and derived alike, in
    its own comparison group; an option at its default, or missing from a table's row (NaN), names nothing."""
    tiny_run["model"] = {"preset": "mamba3", "d_model": 16, "options": {"mamba3": {"d_state": 8, "head_dim": 8}}}
    spec = SweepConfig.model_validate({"base": tiny_run, "grid": {"model.options.mamba3.two_token": [True, False]}})
    run_sweep(spec, tmp_path, workers=1)
    table = study_table(tmp_path)
    assert sorted(table["arch"]) == ["mamba3", "mamba3 (no two-token)"]
    assert collect(tmp_path)[GROUP].nunique() == 2
    for run in (tmp_path / "runs").iterdir():
        recorded = identity.recorded(run)
        assert identity.derive(flatten(runs.config(run))) == dataclasses.replace(recorded, group=None)
    both = {"model.mixer": '["mamba3", "mamba3"]', "model.options.mamba3.two_token": False, "model.options.mamba3.rotary": False}
    assert identity.arch_ablations(both) == ("no two-token", "no rotary")
    assert identity.arch_ablations({**both, "model.options.mamba3.two_token": float("nan"), "model.options.mamba3.rotary": True}) == ()
    assert identity.arch_ablations({"model.mixer": '["rwkv7"]', "model.options.rwkv7.token_shift": False}) == ("no token shift",)
    product = {"model.mixer": '["deltaproduct"]', "model.options.deltaproduct.n_householder": 1.0}  # as a table reads it
    assert identity.arch_ablations(product) == ("n_h = 1",)
    assert identity.arch_ablations({**product, "model.options.deltaproduct.n_householder": 2}) == ()


def test_every_committed_run_json_is_its_config_s_identity():
    """A label rule changed after runs were recorded would leave their run.json naming them the old way (finished
    runs: a queue's run still training, in this checkout, has run.json before its config.yaml)."""
    recorded = sorted(p for p in (QUICK.parents[2] / "results").glob(f"*/*/runs/*/{identity.RUN_JSON}")
                      if (p.parent / "summary.json").exists())
    stale = [str(p.parent) for p in recorded
             if dataclasses.replace(identity.recorded(p.parent), group=None) != identity.derive(flatten(runs.config(p.parent)))]
    assert recorded and not stale


def test_a_committed_run_without_weights_is_one_no_finding_reads_and_keeps_their_digest():
    """The commit rule (docs/development.md): of the runs with a readout, only those no finding reads may come
    without model.safetensors (`landing.drop_uncited_weights`: not learned, or not at its comparison's best rate),
    or those of a study landed lean (its .gitignore holds every run's weights out: `LEAN=1 land.sh`), and each
    keeps the digest `mecheval reproduce --restore` checks against."""
    import json

    from landing.drop_uncited_weights import uncited_runs

    results = QUICK.parents[2] / "results"
    lean = {p.parent for p in results.glob("*/*/.gitignore") if "runs/*/model.safetensors" in p.read_text().split("\n")}
    without = sorted(p.parent for p in results.glob("*/*/runs/*/verdict.json") if not (p.parent / "model.safetensors").exists())
    uncited = {run.resolve() for study in {run.parents[1] for run in without} - lean
               for run in uncited_runs(study, results.parent)}
    wrong = [str(run) for run in without if (run.resolve() not in uncited and run.parents[1] not in lean)
             or len(json.loads((run / "summary.json").read_text()).get("weights_sha256", "")) != 64]
    assert without and not wrong
