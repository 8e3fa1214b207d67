"""Fault injection: mecheval used as a careless or hostile user would (issue 16), one test per defect.

Changed specs, two processes on one directory, Ctrl-C, a killed parent, corrupt files, a full disk
(a simulated OSError), bad arguments: nothing is lost, nothing stale is reused, every error is one line.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.sweeps import SweepConfig, collect, expand, load_sweep, run_sweep
from mecheval.sweeps.executors import RunFailed, check_reachable, run_one
from mecheval.sweeps.runner import SpecChangedError
from mecheval.training import ConfigError, RunDir, RunExistsError, load_run, train, validate_config
from mecheval.training.checkpoint import CheckpointError, read_tensors
from mecheval.training.lock import DirLock, LockedError
from mecheval.training.run_dir import CHECKPOINT, CONFIG, METRICS, MODEL, SUMMARY

GRID = {"optim.lr": [1e-3, 1e-2]}


@pytest.fixture
def tiny_config(tiny_run):
    """`tiny_config(**overrides)`: the suite's tiny run as a TrainConfig, with dotted overrides."""
    return lambda **overrides: validate_config(tiny_run, overrides)


@pytest.fixture
def in_process(monkeypatch):
    """Local sweeps run their jobs in this process, one after another (no worker start-up)."""
    from mecheval.sweeps.executors import Outcome

    def run_local(jobs, workers):
        for job in jobs:
            try:
                yield Outcome(job.name, run_one(job.config, str(job.run_dir), 1))
            except RunFailed as e:
                yield Outcome(job.name, None, str(e))

    monkeypatch.setattr("mecheval.sweeps.runner.run_local", run_local)


def cli(*args: str):
    """Runs `mecheval ARGS` in process; the result has exit_code, output and stderr."""
    return CliRunner().invoke(app, [str(a) for a in args])


def one_error_line(result) -> str:
    """The command failed with one `error:` line and no traceback; returns that line."""
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


def write_spec(path: Path, base: dict, grid: dict = GRID) -> Path:
    path.write_text(yaml.safe_dump({"base": base, "grid": grid}))
    return path


@pytest.fixture
def spawn():
    """`spawn(*ARGS)`: `mecheval ARGS` as its own process group (as a terminal runs it); any group
    still running at the end of the test is killed."""
    procs = []

    def start(*args: str) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "mecheval.cli", *map(str, args)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True))
        return procs[-1]

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_for(predicate, timeout_s: float = 90, what: str = "") -> None:
    deadline = time.time() + timeout_s
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# 1. A changed sweep never silently reuses old runs


def test_a_changed_sweep_is_refused_with_the_fields_then_new_restarts_the_changed_runs(tmp_path, tiny_run, in_process):
    out = tmp_path / "out"
    spec = write_spec(tmp_path / "sweep.yaml", tiny_run)
    assert cli("sweep", spec, "--out", out, "--workers", "2").exit_code == 0
    first = (out / "sweep.yaml").read_text()

    changed = write_spec(tmp_path / "sweep.yaml", {**tiny_run, "model": {"d_model": 32, "max_len": 16}, "steps": 12})
    refused = cli("sweep", changed, "--out", out, "--workers", "2")
    assert refused.exit_code == 2
    assert "2 run(s) here were made with a different spec" in refused.output and "--new" in refused.output
    assert "model.d_model: run has 16, given 32" in refused.output and "steps: run has 24, given 12" in refused.output
    assert (out / "sweep.yaml").read_text() == first
    assert {RunDir(p).read_config().model.d_model for p in (out / "runs").iterdir()} == {16}

    fresh = cli("sweep", changed, "--out", out, "--workers", "2", "--new")
    assert fresh.exit_code == 0, fresh.output
    assert "2 runs: 0 already finished, 2 trained" in fresh.output
    assert {RunDir(p).read_config().model.d_model for p in (out / "runs").iterdir()} == {32}
    assert {RunDir(p).read_summary()["steps"] for p in (out / "runs").iterdir()} == {12}
    assert (out / "sweep.1.yaml").read_text() == first and "sweep.1.yaml" in fresh.output


def test_a_finished_run_whose_summary_disagrees_is_not_skipped(tmp_path, tiny_run):
    sweep = SweepConfig.model_validate({"base": tiny_run, "grid": {"seed": [0]}})
    (run,) = expand(sweep)
    train(run.config, tmp_path / "runs" / run.name, quiet=True)
    summary = RunDir(tmp_path / "runs" / run.name).read_summary()
    (tmp_path / "runs" / run.name / SUMMARY).write_text(json.dumps({**summary, "fingerprint": "0" * 16}))
    with pytest.raises(SpecChangedError, match="summary.json has fingerprint 0000000000000000"):
        run_sweep(sweep, tmp_path)


def test_a_changed_study_is_refused(tmp_path):
    from mecheval.study import STUDIES

    run = expand(SweepConfig.model_validate(STUDIES["quick"].sweep("cpu", archs=["attention"])))[0]  # its first seed
    stale = validate_config(run.config.model_dump(mode="json"), {"steps": 7})
    (tmp_path / "runs" / run.name).mkdir(parents=True)
    RunDir(tmp_path / "runs" / run.name).write_config(stale)
    result = cli("study", "quick", "--archs", "attention", "--out", tmp_path, "--quiet")
    assert "steps: run has 7, given" in one_error_line(result) + result.output
    assert not (tmp_path / "sweep.yaml").exists()


def test_the_same_sweep_again_resumes_without_complaint(tmp_path, tiny_run, in_process):
    sweep = SweepConfig.model_validate({"base": {**tiny_run, "checkpoint_every": 4}, "grid": {"seed": [0]}})
    notes = []
    run_sweep(sweep, tmp_path, workers=1, on_note=notes.append)
    again = run_sweep(sweep, tmp_path, workers=1, on_note=notes.append)
    assert [o.skipped for o in again] == [True] and notes == [] and not (tmp_path / "sweep.1.yaml").exists()


def test_a_grown_sweep_keeps_its_runs_and_says_the_spec_changed(tmp_path, tiny_run, in_process):
    one = SweepConfig.model_validate({"base": tiny_run, "grid": {"seed": [0]}})
    two = SweepConfig.model_validate({"base": tiny_run, "grid": {"seed": [0, 1]}})
    run_sweep(one, tmp_path, workers=1)
    notes = []
    outcomes = run_sweep(two, tmp_path, workers=1, on_note=notes.append)
    assert [o.skipped for o in outcomes] == [True, False]
    assert notes == [f"{tmp_path / 'sweep.yaml'}: the spec changed (grid.seed: [0] -> [0, 1]); the previous one is kept as sweep.1.yaml"]
    assert yaml.safe_load((tmp_path / "sweep.1.yaml").read_text())["grid"] == {"seed": [0]}


# 2. Ctrl-C stops the whole sweep; 4. workers die with their parent


def slow_spec(tmp_path: Path, tiny_run: dict) -> Path:
    base = {**tiny_run, "steps": 4000, "checkpoint_every": 1000, "eval": {"every": 4000, "size": 32}}
    return write_spec(tmp_path / "sweep.yaml", base, {"seed": [0, 1, 2, 3]})


def worker_pids(out: Path) -> list[int]:
    return [json.loads(w.read_text())["pid"] for w in sorted(out.glob("runs/*/worker.json"))]


@pytest.mark.slow
def test_ctrl_c_stops_the_whole_local_sweep_and_a_rerun_resumes(tmp_path, tiny_run, spawn):
    out = tmp_path / "out"
    proc = spawn("sweep", slow_spec(tmp_path, tiny_run), "--out", out, "--workers", "2")
    wait_for(lambda: len(list(out.glob(f"runs/*/{METRICS}"))) == 2, what="two runs training")
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)
    err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 130, err
    assert "stopped: sweep stopped (Ctrl-C): 0 of 4 runs finished" in err and "again to resume" in err
    started = [p for p in (out / "runs").iterdir() if RunDir(p).started]
    assert len(started) == 2, "queued runs must never start"
    assert all((p / CHECKPOINT).exists() for p in started), "running runs checkpoint when stopped"
    pids = worker_pids(out)
    wait_for(lambda: not any(map(alive, pids)), 10, "workers to exit")

    steps = {p: RunDir(p).read_metrics()[-1]["step"] for p in started}
    proc = spawn("sweep", slow_spec(tmp_path, tiny_run), "--out", out, "--workers", "2")
    wait_for(lambda: all(RunDir(p).read_metrics()[-1]["step"] > s for p, s in steps.items()), what="the re-run resuming")
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=30)
    for p in started:
        assert [r["step"] for r in RunDir(p).read_metrics()] == list(range(4, RunDir(p).read_metrics()[-1]["step"] + 1, 4))


def test_a_signal_to_one_worker_stops_the_sweep_in_one_line(tmp_path, tiny_run, spawn):
    """A SIGINT or SIGTERM that only a worker gets (`kill PID`, a scheduler; a sweep started in the background of a
    script ignores SIGINT itself): its run checkpoints, the queued runs never start, and the sweep says so in one
    line, not as every queued run failing."""
    out = tmp_path / "out"
    proc = spawn("sweep", slow_spec(tmp_path, tiny_run), "--out", out, "--workers", "1")
    wait_for(lambda: len(list(out.glob(f"runs/*/{METRICS}"))) == 1, what="a run training")
    time.sleep(1)
    os.kill(worker_pids(out)[0], signal.SIGINT)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("stopped: sweep stopped (a worker was stopped by a signal): 0 of 4 runs finished"), err
    assert "failed" not in err and "not started" not in err
    started = [p for p in (out / "runs").iterdir() if RunDir(p).started]
    assert len(started) == 1 and (started[0] / CHECKPOINT).exists()


def test_a_stop_request_checkpoints_the_run_which_then_resumes_bitwise(tmp_path, tiny_config, monkeypatch):
    from safetensors.torch import load_file

    from mecheval.training import trainer

    cfg = tiny_config(checkpoint_every=100)
    step = trainer.Trainer.train_step

    def stop_at_10(self, batch):
        step(self, batch)
        if self.step == 10:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as the terminal sends it

    monkeypatch.setattr(trainer.Trainer, "train_step", stop_at_10)
    with pytest.raises(trainer.TrainingInterrupted, match="stopped at step 10"):
        train(cfg, tmp_path / "run", quiet=True)
    monkeypatch.undo()
    trainer.STOP.clear()
    assert (tmp_path / "run" / CHECKPOINT).exists()
    train(cfg, tmp_path / "run", resume=True, quiet=True)
    train(cfg, tmp_path / "ref", quiet=True)
    ref, got = load_file(str(tmp_path / "ref" / MODEL)), load_file(str(tmp_path / "run" / MODEL))
    assert all(torch.equal(ref[k], got[k]) for k in ref)


@pytest.mark.slow
def test_workers_stop_when_the_sweep_process_is_killed(tmp_path, tiny_run, spawn):
    out = tmp_path / "out"
    proc = spawn("sweep", slow_spec(tmp_path, tiny_run), "--out", out, "--workers", "2")
    wait_for(lambda: len(list(out.glob(f"runs/*/{METRICS}"))) == 2, what="two runs training")
    pids = worker_pids(out)
    proc.kill()
    proc.communicate()
    wait_for(lambda: not any(map(alive, pids)), 15, "orphaned workers to exit")
    assert all((p / CHECKPOINT).exists() for p in (out / "runs").iterdir() if RunDir(p).started)


@pytest.mark.slow
def test_a_local_ray_dies_with_its_killed_driver(tmp_path, tiny_run, spawn):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'mecheval[ray]')")
    from mecheval.sweeps.reaper import descendants

    out = tmp_path / "out"
    proc = spawn("sweep", slow_spec(tmp_path, tiny_run), "--out", out, "--executor", "ray")
    wait_for(lambda: list(out.glob(f"runs/*/{METRICS}")), 180, "a Ray worker training")
    ray_processes = list(descendants(proc.pid))
    assert len(ray_processes) > 2  # gcs_server, raylet, agents, workers
    proc.kill()
    proc.communicate()
    wait_for(lambda: not any(map(alive, ray_processes)), 20, "Ray's processes to exit")


# 3. One process at a time in a run or sweep directory


def test_a_sweep_directory_in_use_is_refused_naming_the_holder(tmp_path, tiny_run):
    spec = write_spec(tmp_path / "sweep.yaml", tiny_run)
    with DirLock(tmp_path / "out", "sweep directory"):
        line = one_error_line(cli("sweep", spec, "--out", tmp_path / "out"))
    assert f"sweep directory in use by pid {os.getpid()} on {os.uname().nodename}" in line
    assert not (tmp_path / "out" / "runs").exists()


def test_a_run_in_training_cannot_be_resumed_by_another_process(tmp_path, tiny_config):
    cfg = tiny_config()
    with DirLock(tmp_path / "run", "run directory"), pytest.raises(LockedError, match=f"pid {os.getpid()}"):
        train(cfg, tmp_path / "run", resume=True, quiet=True)
    assert train(cfg, tmp_path / "run", resume=True, quiet=True)["steps"] == 24


def test_the_lock_of_a_killed_process_is_stale(tmp_path):
    code = f"from mecheval.training.lock import DirLock; DirLock({str(tmp_path)!r}).acquire(); print('held', flush=True); input()"
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(LockedError, match=f"pid {holder.pid}"):
        DirLock(tmp_path).acquire()
    holder.kill()
    holder.wait()
    DirLock(tmp_path).acquire().release()


# 5. A study (or `runs`) reports only its own runs


def test_a_sweep_directory_lists_only_its_own_runs(tmp_path, tiny_run, tiny_config, in_process):
    train(tiny_config(seed=5), tmp_path / "runs" / "someone-elses", quiet=True)
    run_sweep(SweepConfig.model_validate({"base": tiny_run, "grid": {"seed": [0]}}), tmp_path, workers=1)
    assert list(collect(tmp_path)["name"]) == ["seed-0"]


# 6. One unreadable run does not stop `intervene SWEEP_DIR`


def test_one_unreadable_run_is_skipped_by_intervene(tmp_path, tiny_config):
    for name in ("a", "b"):
        train(tiny_config(), tmp_path / "runs" / name, quiet=True)
    weights = tmp_path / "runs" / "a" / MODEL
    weights.write_bytes(weights.read_bytes()[:200])
    result = cli("intervene", tmp_path, "--n", "16", "--sites", "resid_pre")
    assert result.exit_code == 1
    assert "skipped runs/a:" in result.output and "not a readable safetensors file" in result.output
    assert "error: 1 of 2 runs failed: runs/a" in result.output
    assert (tmp_path / "runs" / "b" / "interventions.parquet").exists()


# 7. One clear line, never a traceback


@pytest.fixture
def finished_run(tmp_path, tiny_config) -> Path:
    train(tiny_config(), tmp_path / "sweep" / "runs" / "r", quiet=True)
    return tmp_path / "sweep" / "runs" / "r"


@pytest.mark.parametrize(
    "option, value, expected",
    [("--sites", "nonesuch", "match no site"), ("--corrupt", "bogus", "cannot corrupt role"),
     ("--positions", "bogus", "not roles of ar"), ("--split", "bogus", "not a split of ar")],
)
def test_bad_intervene_arguments_are_one_line(finished_run, option, value, expected):
    result = cli("intervene", finished_run, option, value)
    assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output
    assert not (finished_run / "interventions.parquet").exists()


@pytest.mark.parametrize("broken, text", [(CONFIG, "model: [unclosed"), (SUMMARY, '{"final": ')])
def test_a_corrupt_run_file_is_one_line(finished_run, broken, text, tmp_path, tiny_run):
    (finished_run / broken).write_text(text)
    line = one_error_line(cli("runs", finished_run.parent.parent))
    assert str(finished_run / broken) in line
    spec = write_spec(tmp_path / "sweep.yaml", tiny_run, {"seed": [0]})
    finished_run.rename(finished_run.parent / "seed-0")  # the sweep's run, its file corrupt
    refused = cli("sweep", spec, "--out", finished_run.parent.parent)
    assert refused.exit_code == 2 and "seed-0: " in refused.output and "Traceback" not in refused.output


def config_file(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def test_out_being_a_file_is_one_line(tmp_path, tiny_run):
    (tmp_path / "file").write_text("mine")
    spec = write_spec(tmp_path / "sweep.yaml", tiny_run)
    assert "--out is a file" in one_error_line(cli("sweep", spec, "--out", tmp_path / "file"))
    with pytest.raises(NotADirectoryError, match="`out` is a file"):  # from Python: the argument, not the flag
        run_sweep(load_sweep(spec), tmp_path / "file")
    assert "is a file" in one_error_line(cli("train", config_file(tmp_path / "c.yaml", tiny_run), "--out", tmp_path / "file"))
    assert (tmp_path / "file").read_text() == "mine"


@pytest.mark.parametrize("errno, text", [(28, "No space left on device"), (13, "Permission denied")])
def test_a_full_disk_or_an_unwritable_out_is_one_line(tmp_path, tiny_run, monkeypatch, errno, text):
    def full(path, data, root=None):
        raise OSError(errno, text, str(path))

    monkeypatch.setattr("mecheval.common.atomic_write_bytes", full)
    spec = write_spec(tmp_path / "sweep.yaml", tiny_run)
    line = one_error_line(cli("sweep", spec, "--out", tmp_path / "out"))
    assert line.startswith(f"error: {tmp_path / 'out' / 'sweep.yaml'}: {text}")


@pytest.fixture
def small_disk(tmp_path):
    """A 160 KiB tmpfs: room for one checkpoint of the tiny run, not for the next (root only; else skipped)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root with mount rights); the simulated full disk still runs")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def test_a_really_full_disk_loses_nothing(small_disk, tmp_path, tiny_run, tiny_config):
    from safetensors.torch import load_file

    result = cli("train", config_file(tmp_path / "c.yaml", tiny_run), "--out", small_disk / "run", "--quiet")
    assert "No space left on device" in one_error_line(result)
    assert not list((small_disk / "run").glob(".*tmp*")), "a failed write leaves no partial file"
    run = tmp_path / "moved"
    subprocess.run(["cp", "-r", str(small_disk / "run"), str(run)], check=True)
    train(tiny_config(), run, resume=True, quiet=True)  # resumes from the checkpoint the full disk kept
    train(tiny_config(), tmp_path / "ref", quiet=True)
    ref, got = load_file(str(tmp_path / "ref" / MODEL)), load_file(str(run / MODEL))
    assert all(torch.equal(ref[k], got[k]) for k in ref)


def test_debug_shows_the_traceback(tmp_path, tiny_run, monkeypatch):
    monkeypatch.setattr("mecheval.common.atomic_write_bytes", lambda p, d, root=None: 1 / 0)
    spec = write_spec(tmp_path / "sweep.yaml", tiny_run)
    assert "ZeroDivisionError" in one_error_line(cli("sweep", spec, "--out", tmp_path / "out"))
    assert "Traceback" in cli("--debug", "sweep", spec, "--out", tmp_path / "out").output


def test_an_unknown_study_executor_is_one_line(tmp_path):
    result = cli("study", "quick", "--out", tmp_path, "--executor", "dask")
    text = " ".join(" ".join(line.strip(" │") for line in result.output.splitlines()).split())  # the usage box wraps
    assert result.exit_code == 2 and "'--executor'" in text and "'dask' is not one of 'local', 'ray'" in text
    assert not any(tmp_path.iterdir())


def test_a_model_that_cannot_be_built_is_refused_before_anything_is_written(tmp_path, tiny_run):
    bad = {**tiny_run, "model": {"d_model": 30, "max_len": 16, "options": {"attention": {"n_heads": 4}}}}
    result = cli("train", config_file(tmp_path / "c.yaml", bad), "--out", tmp_path / "run")
    assert "c.yaml: invalid config" in one_error_line(result) and not (tmp_path / "run").exists()
    assert "options.attention: n_heads=4 does not divide d_model=30" in result.output
    spec = write_spec(tmp_path / "sweep.yaml", bad)
    result = cli("sweep", spec, "--out", tmp_path / "out")
    assert result.exit_code == 2 and "n_heads=4 does not divide d_model=30" in result.output and not (tmp_path / "out").exists()


def test_ray_missing_is_one_line(tmp_path, tiny_run, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    spec = write_spec(tmp_path / "sweep.yaml", tiny_run)
    line = one_error_line(cli("sweep", spec, "--out", tmp_path / "out", "--executor", "ray"))
    assert "pip install 'mecheval[ray]'" in line


def test_an_unreachable_ray_address_fails_fast():
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match="cannot reach a Ray cluster at 127.0.0.1:1"):
        check_reachable("127.0.0.1:1")
    assert time.perf_counter() - start < 10


# 8. Leftovers and overwrites


def test_a_failed_train_leaves_nothing_and_a_users_files_are_never_replaced(tmp_path, tiny_config, tiny_run, monkeypatch):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / METRICS).write_text("my notes\n")
    with pytest.raises(RunExistsError, match="not a mecheval run"):
        train(tiny_config(), tmp_path / "mine", quiet=True)
    assert (tmp_path / "mine" / METRICS).read_text() == "my notes\n"
    assert [p.name for p in (tmp_path / "mine").iterdir()] == [METRICS]

    def cannot_build(cfg):
        raise ValueError("cannot build this model")

    with monkeypatch.context() as m, pytest.raises(ValueError, match="cannot build"):  # after the config validated
        m.setattr("mecheval.training.trainer.build_model", cannot_build)
        train(tiny_config(), tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()
    assert train(tiny_config(), tmp_path / "run", quiet=True)["steps"] == 24


def test_resume_keeps_a_users_commented_config(tmp_path, tiny_config):
    out = tmp_path / "run"
    train(tiny_config(checkpoint_every=4), out, quiet=True)
    (out / SUMMARY).unlink()  # unfinished again
    commented = "# my notes\n" + (out / CONFIG).read_text()
    (out / CONFIG).write_text(commented)
    result = cli("train", "--out", out, "--resume", "--quiet")
    assert result.exit_code == 0, result.output
    assert (out / CONFIG).read_text() == commented


# 9. Weights are checked when loaded


def test_random_bytes_in_the_weights_are_refused(finished_run):
    weights = finished_run / MODEL
    data = bytearray(weights.read_bytes())
    start = 8 + struct.unpack("<Q", data[:8])[0]
    data[start:start + 64] = b"\xff" * 64  # NaNs in the first tensor
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="non-finite"):
        load_run(finished_run)


# 10. Metrics and failures


def test_only_a_torn_last_metrics_line_is_tolerated(tmp_path):
    (tmp_path / METRICS).write_text('{"step": 4}\n{"ste\n{"step": 8}\n')
    with pytest.raises(ConfigError, match=f"{METRICS}:2: not a metrics record"):
        RunDir(tmp_path).read_metrics()


def test_a_failed_sweep_run_keeps_its_traceback_in_the_run_log(tmp_path, tiny_config):
    (tmp_path / METRICS).write_text("not ours\n")
    with pytest.raises(RunFailed, match="not a mecheval run.*traceback in .*error.log"):
        run_one(tiny_config().model_dump(mode="json"), str(tmp_path), 1)
    log = (tmp_path / "error.log").read_text()
    assert "Traceback (most recent call last)" in log and "RunExistsError" in log


def test_the_cli_needs_no_click_beyond_what_typer_brings():
    """`make run` installs mecheval without extras; recent typer vendors click, so importing click breaks it."""
    import subprocess
    import sys

    code = "import sys; sys.modules['click'] = None; import mecheval.cli"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_killed_run_keeps_its_snapshots_and_its_resume_writes_the_rest(tmp_path, tiny_run, spawn):
    """SIGKILL mid-training (no chance to clean up): the snapshots written stay (a resume rewrites those after
    its checkpoint with the same weights); the resumed run writes the missing ones, each equal to the
    uninterrupted run's, bit for bit."""
    base = {**tiny_run, "steps": 1000, "checkpoint_every": 100, "eval": {"every": 1000, "size": 32},
            "snapshots": {"every": 50}}
    out = tmp_path / "run"
    proc = spawn("train", config_file(tmp_path / "c.yaml", base), "--out", out, "--quiet")
    wait_for(lambda: len(list(out.glob("snapshots/step-*.safetensors"))) >= 4, what="four snapshots")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = {p.name: read_tensors(p) for p in out.glob("snapshots/step-*.safetensors")}
    assert not RunDir(out).finished
    cfg = validate_config(base)
    train(cfg, out, resume=True, quiet=True)
    names = {f"step-{s:07d}.safetensors" for s in range(0, 1001, 50)}
    assert {p.name for p in out.glob("snapshots/*")} == names  # and no torn temporary file left
    train(cfg, tmp_path / "ref", quiet=True)

    def same(a, b):  # tensors bitwise and metadata (the bytes may differ: the header's key order is not fixed)
        return a[1] == b[1] and a[0].keys() == b[0].keys() and all(torch.equal(a[0][k], b[0][k]) for k in a[0])

    for n in sorted(names):
        now = read_tensors(out / "snapshots" / n)
        assert n not in kept or same(now, kept[n]), f"{n} changed on resume"
        assert same(now, read_tensors(tmp_path / "ref" / "snapshots" / n)), f"{n} differs from the uninterrupted run's"


@pytest.mark.parametrize("args,says", [(["--train-order", "sorted"], "'sorted' is not one of 'replay', 'shuffle'"),
                                       (["--train-order", "replay"], "train_order applies to the paper scale"),
                                       (["--grammars", "easy"], "Invalid value for --grammars: grammars apply to ATR studies")])
def test_a_bad_study_axis_is_one_line(tmp_path, args, says):
    result = cli("study", "quick", *args, "--out", tmp_path, "--quiet")
    text = " ".join(line.strip(" │") for line in result.output.splitlines())  # typer's usage box wraps lines
    assert result.exit_code == 2 and "Traceback" not in result.output and says in " ".join(text.split())
    assert not (tmp_path / "sweep.yaml").exists()
