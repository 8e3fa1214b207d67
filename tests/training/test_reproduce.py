"""`reproduce`: a finished run retrained from its config gives the same weights, bitwise; a changed one is caught,
by tensor where the weights are there and by the summary's digest where they are not."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.training import train
from mecheval.training.checkpoint import weights_digest
from mecheval.training.reproduce import reproduce
from mecheval.training.run_dir import MODEL, SUMMARY


def verdict(label: str) -> str:
    """A verdict.json of `label` with the fields readers check (`interventions.runs.VERDICT_FIELDS`)."""
    return json.dumps({"verdict": label, "detail": "", "effect": 0.5, "layer": 0, "site": "layers.0.conv", "n": 32,
                       "attrib@key": 0.0, "attrib@value": 0.0, "attrib@query": 1.0})


@pytest.fixture
def run(tmp_path, tiny_config):
    torch.set_num_threads(1)
    train(tiny_config(), tmp_path / "run", quiet=True)
    return tmp_path / "run"


def test_a_run_is_reproduced_bitwise_and_its_summary_keeps_the_digest_and_threads(run):
    summary = json.loads((run / SUMMARY).read_text())
    assert summary["threads"] == 1 and summary["weights_sha256"] == weights_digest(load_file(run / MODEL))
    outcome = reproduce(run)
    assert outcome.same and outcome.threads == 1 and outcome.steps == summary["steps"]
    assert "reproduced bitwise" in CliRunner().invoke(app, ["reproduce", str(run)]).output


def test_one_changed_number_is_caught_by_tensor_and_by_digest(run):
    weights = load_file(run / MODEL)
    name = sorted(weights)[0]
    weights[name].view(-1)[0] += 1e-6  # one element moved: not the run's weights any more
    save_file(weights, run / MODEL, {"fingerprint": json.loads((run / SUMMARY).read_text())["fingerprint"]})
    outcome = reproduce(run)
    assert not outcome.same and outcome.differing == [name] and 0 < outcome.max_abs_diff < 1e-5
    result = CliRunner().invoke(app, ["reproduce", str(run)])
    assert result.exit_code == 1 and "NOT reproduced" in result.output
    summary = json.loads((run / SUMMARY).read_text())
    (run / MODEL).unlink()  # no weights committed: the digest decides
    assert reproduce(run).same
    (run / SUMMARY).write_text(json.dumps(summary | {"weights_sha256": "0" * 64}))
    assert not reproduce(run).same


def test_a_run_with_nothing_to_compare_is_one_clear_error(run):
    (run / MODEL).unlink()
    summary = json.loads((run / SUMMARY).read_text())
    del summary["weights_sha256"]
    (run / SUMMARY).write_text(json.dumps(summary))
    with pytest.raises(ValueError, match="nothing to compare with"):
        reproduce(run)
    (run / SUMMARY).unlink()
    with pytest.raises(ValueError, match="not a finished run"):
        reproduce(run)


def test_a_run_that_did_not_learn_lands_without_weights_and_restore_brings_them_back(run):
    """The commit rule: `tools/landing/drop_uncited_weights.py` drops the weights of a run whose verdict is `not
    learned` (only where summary.json keeps their digest); loading it then says how to get them back, and
    `mecheval reproduce RUN --restore` retrains it and writes weights with that digest; a learned run keeps its
    weights, and a digest that does not match keeps them too."""
    from landing.drop_uncited_weights import main as drop_uncited

    from mecheval import load_run

    original = weights_digest(load_file(run / MODEL))
    (run / "verdict.json").write_text(verdict("direct retrieval"))
    assert drop_uncited([str(run.parent)]) == 0 and (run / MODEL).exists()  # learned: kept
    (run / "verdict.json").write_text(verdict("not learned"))
    summary = json.loads((run / SUMMARY).read_text())
    (run / SUMMARY).write_text(json.dumps(summary | {"weights_sha256": "0" * 64}))
    assert drop_uncited([str(run.parent)]) == 1 and (run / MODEL).exists()  # its digest does not vouch for them
    (run / SUMMARY).write_text(json.dumps(summary))
    assert drop_uncited([str(run.parent)]) == 0 and not (run / MODEL).exists()
    with pytest.raises(FileNotFoundError, match="--restore"):
        load_run(run)
    result = CliRunner().invoke(app, ["reproduce", str(run), "--restore"])
    assert result.exit_code == 0 and "its weights restored" in result.output
    assert weights_digest(load_file(run / MODEL)) == original and load_run(run)[0] is not None


def test_a_bracket_run_at_a_worse_rate_lands_without_weights_the_best_rate_keeps_them(run, tmp_path):
    """At the published scale the rule pools a cell's studies: of two learned runs of one cell in two studies, the
    one at the worse rate loses its weights, the best keeps them; a study elsewhere (results/cpu) keeps its own best."""
    import shutil

    import yaml
    from landing.drop_uncited_weights import main as drop_uncited

    def study(scale: str, name: str, lr: float, acc: float) -> Path:
        copy = tmp_path / "repo" / "results" / scale / name / "runs" / f"lr-{lr}"
        shutil.copytree(run, copy)
        config = yaml.safe_load((copy / "config.yaml").read_text())
        (copy / "config.yaml").write_text(yaml.safe_dump(config | {"optim": config["optim"] | {"lr": lr}}))
        summary = json.loads((copy / SUMMARY).read_text())
        summary["final"]["test"]["acc"] = acc
        (copy / SUMMARY).write_text(json.dumps(summary))
        (copy / "verdict.json").write_text(verdict("direct retrieval"))
        return copy

    best, worse = study("paper-d16", "a", 1e-3, 0.9), study("paper-d16", "b", 3e-3, 0.5)
    elsewhere = study("cpu", "c", 3e-3, 0.5)
    assert drop_uncited([str(p.parents[1]) for p in (best, worse, elsewhere)], tmp_path / "repo") == 0
    assert (best / MODEL).exists() and not (worse / MODEL).exists() and (elsewhere / MODEL).exists()
