"""Fit to the training set: the logged training-batch accuracy, and runs that fit their training set only."""

import json

import pandas as pd
import pytest

from mecheval import load_run
from mecheval.report.fit import FITS_ONLY, any_fits_only, fit_table, training_accuracy
from mecheval.training import train, validate_config
from mecheval.training.data import TrainStream, eval_sets
from mecheval.training.trainer import evaluate


def _metrics(run_dir, accs: dict[int, float]) -> None:
    run_dir.mkdir(parents=True)
    lines = [json.dumps({"step": s, "loss": 1.0, "acc": a}) for s, a in accs.items()]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_training_accuracy_reads_the_last_steps_only(tmp_path):
    # 0.2 for the first 2,000 steps, then alternating 0.8 / 1.0: the last 1,000 steps are 100 batches of mean 0.9
    _metrics(tmp_path / "run", {s: 0.2 if s <= 2000 else (0.8 if s % 20 else 1.0) for s in range(10, 3001, 10)})
    mean, lo, hi, k = training_accuracy(tmp_path / "run")
    assert k == 100 and mean == pytest.approx(0.9) and 0.87 < lo < 0.9 < hi < 0.93
    assert training_accuracy(tmp_path / "run", last=3000)[0] == pytest.approx((200 * 0.2 + 100 * 0.9) / 300)
    (tmp_path / "empty").mkdir()
    assert training_accuracy(tmp_path / "empty") is None


def _row(run_dir, acc: float, train_size=100032) -> dict:
    return {"arch": "attention (1 layer)", "model.d_model": 64, "optim.lr": 1e-3, "seed": 0, "acc": acc,
            "train_size": train_size, "eval.size": 1024, "run_dir": str(run_dir)}


def test_a_run_that_fits_its_training_set_only_reads_so(tmp_path):
    _metrics(tmp_path / "memorised", {s: 1.0 if s % 20 else 0.98 for s in range(10, 3001, 10)})
    _metrics(tmp_path / "learned", {s: 1.0 if s % 20 else 0.98 for s in range(10, 3001, 10)})
    _metrics(tmp_path / "close", {s: 0.5 for s in range(10, 3001, 10)})  # 0.5 against 0.30: a gap of 0.2, inside the margin
    best = pd.DataFrame([_row(tmp_path / "memorised", 0.05), _row(tmp_path / "learned", 0.97),
                         _row(tmp_path / "close", 0.30), _row(tmp_path / "fresh", 0.05, train_size=None)])
    fit = fit_table(best)
    assert list(fit["reading"]) == [FITS_ONLY, "–", "–"]  # the run without a fixed set has no row
    assert fit["test accuracy [95% CI]"][0] == "0.05 [0.04, 0.06] (n=1024)"
    assert any_fits_only(fit) and not any_fits_only(fit.iloc[1:]) and not any_fits_only(pd.DataFrame())


def test_the_logged_estimate_matches_the_training_set_itself(tmp_path, tiny_run):
    """A run on a fixed set of 16 examples (one batch): the logged accuracy of its last steps against the
    trained model's accuracy on those 16 examples, recomputed from the weights."""
    cfg = validate_config({**tiny_run, "optim": {"lr": 1e-2}},
                          {"train_size": 16, "steps": 200, "log_every": 1, "eval.every": 200})
    train(cfg, tmp_path / "run", quiet=True)
    lm, task, cfg = load_run(tmp_path / "run")
    pool = TrainStream(task, cfg.batch_size, cfg.seed, cfg.train_size, cfg.train_order).pool
    on_pool = evaluate(lm, pool, 16, False)["acc"]
    fresh = evaluate(lm, eval_sets(task, ["test"], 256, cfg.eval.seed)["test"], 64, False)["acc"]
    logged = training_accuracy(tmp_path / "run", last=10)[0]
    assert on_pool > fresh + 0.3  # 16 examples, 200 steps: fitted, not learned
    assert logged == pytest.approx(on_pool, abs=0.1)
