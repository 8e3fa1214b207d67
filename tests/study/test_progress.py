"""The study's training bar names each unfinished run's step."""

from __future__ import annotations

import json

from mecheval.study.progress import last_step, training_now


def test_training_now_names_the_steps_of_unfinished_runs(tmp_path):
    for name, steps, finished in (("a", [10, 20], False), ("b", [10], True), ("c", [], False)):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in steps))
        if finished:
            (run / "summary.json").write_text("{}")
    assert training_now(tmp_path) == "a step 20"


def test_a_torn_last_line_reads_the_record_before_it(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 5}\n{"step": 6, "lo')
    assert last_step(tmp_path) == 5
    assert last_step(tmp_path / "missing") is None
