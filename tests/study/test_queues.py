"""The queues in tools/queues/ (hours of training each, run in later sessions): every line must be a study the
real CLI accepts, whose runs all validate and build, and no directory may be the work of two lines; every sweep
file there must expand and build. A typo otherwise surfaces only when its runner reaches the line."""

import shlex
from collections import Counter
from pathlib import Path

import pytest
import typer

from mecheval.cli import app
from mecheval.study import STUDIES
from mecheval.study.command import study_axes
from mecheval.sweeps.preflight import check_models
from mecheval.sweeps.spec import SweepConfig, expand, load_sweep

QUEUES = Path(__file__).resolve().parents[2] / "tools" / "queues"


def queue_lines() -> list[tuple[str, str, str]]:
    """(queue file, OUT_DIR, the `mecheval study` arguments) of every line, as `run_queue.sh` reads them."""
    lines = []
    for path in sorted(QUEUES.glob("*.txt")):
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                out, args = line.split(" ", 1)
                lines.append((path.name, out, args))
    return lines


LINES = queue_lines()


def command_of(out: str, args: str) -> str:
    """The command `run_queue.sh` runs for a line (its scale from the directory: results/cpu/ is the cpu scale),
    less `--workers 1 --quiet`, which do not change what it trains."""
    scale = "cpu" if out.startswith("results/cpu/") else "paper"
    return f"mecheval study {args} --scale {scale} --early-stop --out {shlex.quote(out)}"


def test_the_queues_have_lines():
    assert len(LINES) > 20 and len(list(QUEUES.glob("*.yaml"))) >= 3


@pytest.mark.parametrize(("queue", "out", "args"), LINES, ids=[out for _, out, _ in LINES])
def test_each_queue_line_is_a_study_whose_runs_build(queue, out, args):
    command = command_of(out, args)
    typer.main.get_command(app).commands["study"].make_context("study", shlex.split(command)[2:])  # unknown flags raise
    preset, scale, axes = study_axes(command)
    runs = expand(SweepConfig.model_validate(STUDIES[preset].sweep(scale, **axes)))
    assert runs, f"{queue}: {out} trains no run"
    check_models(runs)


def test_no_directory_is_two_lines_work():
    twice = [out for out, k in Counter(out for _, out, _ in LINES).items() if k > 1]
    assert twice == []


@pytest.mark.parametrize("path", sorted(QUEUES.glob("*.yaml")), ids=lambda p: p.name)
def test_each_queue_sweep_expands_and_builds(path):
    runs = expand(load_sweep(path))
    assert runs
    check_models(runs)


def test_a_typo_in_a_line_is_caught():
    """The checks above fail on a misspelt architecture and on an unknown flag."""
    with pytest.raises(ValueError, match="mamba3 \\(dconv 4\\)"):
        STUDIES["modern"].sweep("paper", **study_axes(command_of("results/x", "modern --archs 'mamba3 (dconv 4)'"))[2])
    with pytest.raises(Exception, match="--lr"):
        typer.main.get_command(app).commands["study"].make_context("study", ["modern", "--lr", "1e-3", "--out", "x"])


def test_the_runner_reads_its_queue_afresh_after_each_study(tmp_path):
    """`run_queue.sh` with a stand-in for mecheval: a line added at the top while a study runs is run next (the
    runner used to read on from a byte offset, so an edit above it garbled the next line); a study that fails is
    not retried; finished ones are skipped."""
    import subprocess

    queue, calls = tmp_path / "q.txt", tmp_path / "calls"
    queue.write_text(f"# a queue\n{tmp_path}/a quick --archs attention\n{tmp_path}/bad quick\n{tmp_path}/b quick\n")
    fake = tmp_path / "mecheval"
    fake.write_text(f"""#!/usr/bin/env bash
while [[ $# -gt 0 && $1 != --out ]]; do shift; done; out=$2
echo "$out" >> {calls}
[[ $out == */a ]] && sed -i '1a {tmp_path}/x quick' {queue}
[[ $out == */bad ]] && exit 1
touch "$out/report.md" "$out/study.json"
""")
    fake.chmod(0o755)
    done = subprocess.run(["bash", str(QUEUES / "run_queue.sh"), str(queue)], env={"PATH": "/usr/bin:/bin",
                          "MECHEVAL": str(fake)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [Path(p).name for p in calls.read_text().split()] == ["a", "x", "bad", "b"]
    assert f"FAILED: {tmp_path}/bad" in done.stdout
    again = subprocess.run(["bash", str(QUEUES / "run_queue.sh"), str(queue)], env={"PATH": "/usr/bin:/bin",
                           "MECHEVAL": str(fake)}, capture_output=True, text=True, timeout=60)
    assert [Path(p).name for p in calls.read_text().split()] == ["a", "x", "bad", "b", "bad"]  # only the failed one again
    assert f"done: {tmp_path}/a" in again.stdout


@pytest.mark.parametrize("lean", [False, True])
def test_land_stages_the_finished_runs_of_a_study_that_has_not_ended(tmp_path, lean):
    """`land.sh` in a repository holding a study still running (its study.running.json): the finished runs' files
    are staged, their logs compressed (a run not read to its verdict yet: the training files, not a readout left
    partway); the run in training is not; nothing of a study without the marker is. LEAN=1: the logs stay out, by
    the .gitignore the study then carries (staged with it), and stay on disk."""
    import subprocess
    import sys

    repo = tmp_path / "repo"
    (repo / "tools" / "queues").mkdir(parents=True)
    (repo / "tools" / "queues" / "land.sh").write_text((QUEUES / "land.sh").read_text())
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    study = repo / "results" / "cpu" / "s"
    runs = {"done": ("config.yaml", "summary.json", "metrics.jsonl"), "training": ("config.yaml", "metrics.jsonl"),
            "failed": ("config.yaml", "metrics.jsonl", "error.log"),
            "read": ("config.yaml", "summary.json", "metrics.jsonl", "interventions.parquet", "verdict.json")}
    for run, files in runs.items():
        (study / "runs" / run).mkdir(parents=True)
        for name in files:
            (study / "runs" / run / name).write_text("{}\n")
    (study / "runs" / "done" / "interventions.parquet").write_text("")  # a readout stopped before its verdict
    (study / "sweep.yaml").write_text("base: {}\n")
    (study / "study.running.json").write_text("{}\n")
    other = repo / "results" / "cpu" / "no-marker" / "runs" / "r"
    other.mkdir(parents=True)
    (other / "summary.json").write_text("{}\n")
    done = subprocess.run(["bash", "tools/queues/land.sh"], cwd=repo, capture_output=True, text=True, timeout=120,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                               "MECHEVAL": str(Path(sys.executable).parent / "mecheval")} | ({"LEAN": "1"} if lean else {}))
    assert done.returncode == 0, done.stderr
    staged = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=repo, capture_output=True,
                            text=True).stdout.split()
    logs = [] if lean else ["metrics.jsonl.gz"]
    read = [f"results/cpu/s/runs/read/{name}" for name in
            sorted(["config.yaml", "interventions.parquet", *logs, "summary.json", "verdict.json"])]
    expected = [*(f"results/cpu/s/runs/done/{name}" for name in sorted(["config.yaml", *logs, "summary.json"])), *read,
                "results/cpu/s/study.running.json", "results/cpu/s/sweep.yaml"]
    assert sorted(staged) == sorted(expected + (["results/cpu/s/.gitignore"] if lean else []))
    assert (study / "runs" / "read" / "metrics.jsonl.gz").exists()  # left out of the commit, not lost
    if lean:
        assert (study / ".gitignore").read_text().split("\n")[1:] == ["figures/", "runs/*/metrics.jsonl.gz",
                                                                      "runs/*/model.safetensors", ""]
    assert "staged 2 finished run(s) of results/cpu/s (not ended)" in done.stdout
