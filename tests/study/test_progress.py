"""The study's training bars: the study's steps over every run (finished runs in full) and each running run's step."""

from __future__ import annotations

import json
import re
import time

from mecheval.study import progress
from mecheval.study.progress import last_step, steps_done, training_bars


def _runs(root, runs):
    for name, steps, finished in runs:
        run = root / "runs" / name
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in steps))
        if finished:
            (run / "summary.json").write_text("{}")


def test_steps_done_counts_finished_runs_in_full_and_running_ones_at_their_step(tmp_path):
    _runs(tmp_path, [("a", [10, 20], False), ("b", [10], True), ("c", [], False)])
    planned = {"a": 100, "b": 100, "c": 100, "d": 100}  # b stopped early at 10; d has not started
    assert steps_done(tmp_path, planned) == {"a": 20, "b": 100, "c": None, "d": None}


def test_the_bars_show_the_study_in_steps_and_each_running_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    _runs(tmp_path, [("a", [10, 20], False), ("b", [10], True)])
    with training_bars(tmp_path, {"a": 100, "b": 100}) as finished:
        finished(object())
        time.sleep(0.2)
    err = capsys.readouterr().err
    assert "120/200" in err and "1 of 2 runs done" in err  # the study: b in full, a at step 20
    assert "a:" in err and "20/100" in err  # a's own bar
    with training_bars(tmp_path, {"a": 100}, quiet=True) as finished:
        finished()
    assert capsys.readouterr().err == ""


def test_a_torn_last_line_reads_the_record_before_it(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 5}\n{"step": 6, "lo')
    assert last_step(tmp_path) == 5
    assert last_step(tmp_path / "missing") is None


def test_a_run_first_seen_mid_way_counts_its_rate_from_there(tmp_path, monkeypatch, capsys):
    """A run's first look finds it at step 40 after an instant: its bar (and a resumed study's) must not read
    40 steps in ~0 s as millions of steps per second; the rate counts from the step first seen."""
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    _runs(tmp_path, [("a", [10, 20, 30, 40], False)])
    with training_bars(tmp_path, {"a": 2000}):
        time.sleep(0.1)
        with (tmp_path / "runs" / "a" / "metrics.jsonl").open("a") as f:
            f.write(json.dumps({"step": 50}) + "\n")  # 10 steps in >= 0.1 s: at most ~100 steps/s
        time.sleep(0.1)
    rates = [float(r) for r in re.findall(r"([\d.]+)step/s", capsys.readouterr().err)]
    assert rates and max(rates) < 1000
