"""`reproduce`: a finished run retrained from its config gives the same weights, bitwise; a changed one is caught,
by tensor where the weights are there and by the summary's digest where they are not."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.training import train
from mecheval.training.checkpoint import weights_digest
from mecheval.training.reproduce import reproduce
from mecheval.training.run_dir import MODEL, SUMMARY


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
