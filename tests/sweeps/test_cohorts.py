"""`--cohort`: a sweep's compatible runs train as cohorts, each in the run directory it would have alone."""

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.sweeps import SweepConfig, expand
from mecheval.sweeps.cohorts import auto_size, form_cohorts, parse_cohort
from mecheval.sweeps.executors import CohortJob, Job
from mecheval.training import ConfigError, train
from mecheval.training.run_dir import CHECKPOINT, RunDir
from tests.sweeps.test_local import crash_midway


def jobs_of(spec: dict, tmp_path) -> list[Job]:
    return [Job(r.name, r.config.model_dump(mode="json"), tmp_path / r.name) for r in expand(SweepConfig.model_validate(spec))]


def test_cohorts_hold_runs_that_differ_only_in_seed_rate_and_decay(tmp_path, base):
    spec = {"base": base, "grid": {"seed": [0, 1, 2], "optim.lr": [1e-3, 1e-2]},
            "list": [{"model.d_model": 16}, {"model.d_model": 8, "optim.weight_decay": 0.1}]}
    jobs = jobs_of(spec, tmp_path)
    formed = form_cohorts(jobs, 4)
    assert [len(j.members) if isinstance(j, CohortJob) else 1 for j in formed] == [4, 2, 4, 2]
    for job in formed:
        widths = {m.config["model"]["d_model"] for m in getattr(job, "members", [job])}
        assert len(widths) == 1  # never two widths in one cohort
    assert sorted(m.name for j in formed for m in getattr(j, "members", [j])) == sorted(j.name for j in jobs)
    alone = form_cohorts(jobs_of({"base": base, "list": [{"model.d_model": 16}, {"model.d_model": 8}]}, tmp_path), 4)
    assert all(isinstance(j, Job) for j in alone)


def test_auto_fills_memory_but_keeps_every_worker_busy(tmp_path, base):
    jobs = jobs_of({"base": base, "grid": {"seed": list(range(8))}}, tmp_path)
    assert auto_size(jobs, len(jobs), workers=None) >= 8  # a tiny model: all fit
    assert auto_size(jobs, len(jobs), workers=2) == 4
    assert [len(j.members) for j in form_cohorts(jobs, "auto", workers=2)] == [4, 4]


@pytest.mark.parametrize("text", ["0", "-1", "many"])
def test_a_cohort_is_a_size_or_auto(text):
    assert parse_cohort("auto") == "auto" and parse_cohort("3") == 3 and parse_cohort(None) is None
    with pytest.raises(ConfigError, match=f"cohort must be a size >= 1 or 'auto', got '{text}'"):
        parse_cohort(text)


def test_sweep_with_cohorts_trains_every_run_where_it_would_be_alone(tmp_path, base, monkeypatch):
    """Four compatible runs in two cohorts of 2 on one worker; one was killed mid-way alone and resumes in its
    cohort. Every run equals its solo run bit for bit (CPU: the loop engine); a second call skips them all."""
    spec = {"base": base, "grid": {"seed": [0, 1], "optim.lr": [1e-3, 1e-2]}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    runs = {r.name: r for r in expand(SweepConfig.model_validate(spec))}
    unfinished = runs["lr-0.01_seed-1"]
    crash_midway(unfinished.config, out / "runs" / unfinished.name, monkeypatch)
    assert (out / "runs" / unfinished.name / CHECKPOINT).exists()

    cli = CliRunner()
    command = ["sweep", str(tmp_path / "sweep.yaml"), "--out", str(out), "--workers", "1", "--cohort", "2"]
    result = cli.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "cohorts: 4 runs in 2 cohorts of 2–2" in result.output
    assert "4 runs: 0 already finished, 4 trained, 0 failed" in result.output
    for name in ("lr-0.001_seed-0", unfinished.name):
        train(runs[name].config, tmp_path / "ref" / name, quiet=True)
        ref = load_file(str(tmp_path / "ref" / name / "model.safetensors"))
        got = load_file(str(out / "runs" / name / "model.safetensors"))
        assert all(torch.equal(ref[k], got[k]) for k in ref)
    assert all(RunDir(out / "runs" / name).finished for name in runs)

    again = cli.invoke(app, command)
    assert again.exit_code == 0 and "4 already finished, 0 trained" in again.output

    bad = cli.invoke(app, [*command[:-1], "0"])
    assert bad.exit_code == 2 and "cohort must be a size >= 1" in bad.output


def test_study_passes_its_cohort_to_the_sweep(tmp_path, monkeypatch):
    """`mecheval study … --cohort auto` reaches `run_sweep` (a cheap check: the sweep stops there)."""
    import mecheval.study.run

    seen = []

    def run_sweep(*args, cohort=None, **kwargs):
        seen.append(cohort)
        raise KeyboardInterrupt

    monkeypatch.setattr(mecheval.study.run, "run_sweep", run_sweep)
    result = CliRunner().invoke(app, ["study", "quick", "--out", str(tmp_path / "q"), "--cohort", "auto", "--quiet"])
    assert result.exit_code == 130 and seen == ["auto"]  # Ctrl-C, as the CLI reports it
    refused = CliRunner().invoke(app, ["study", "quick", "--out", str(tmp_path / "q"), "--cohort", "x"])
    assert refused.exit_code == 2 and "--cohort" in refused.output


@pytest.mark.slow
def test_a_cohort_is_one_ray_task(tmp_path, base):
    """Two runs as one Ray task (one worker process trained both), each equal to its solo run."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'mecheval[ray]')")
    from mecheval.sweeps import run_sweep
    from mecheval.training.run_dir import WORKER

    spec = SweepConfig(base=base, grid={"seed": [0, 1]})
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        outcomes = run_sweep(spec, tmp_path / "out", executor="ray", cohort=2, on_note=lambda text: None)
    finally:
        ray.shutdown()
    assert [o.error for o in outcomes] == [None, None]
    dirs = [tmp_path / "out" / "runs" / o.name for o in outcomes]
    assert len({yaml.safe_load((d / WORKER).read_text())["pid"] for d in dirs}) == 1
    for run, run_dir in zip(expand(spec), dirs):
        train(run.config, tmp_path / "ref" / run.name, quiet=True)
        ref = load_file(str(tmp_path / "ref" / run.name / "model.safetensors"))
        got = load_file(str(run_dir / "model.safetensors"))
        assert all(torch.equal(ref[k], got[k]) for k in ref)
