"""`mecheval data show|stats` through typer's CliRunner: content of the output, errors."""

import re

import pytest
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.commands.options import parse_overrides

runner = CliRunner()


def run(*args):
    return runner.invoke(app, ["data", *args])


def test_show_ar_marks_roles_and_answer():
    r = run("show", "ar", "--n", "3", "--seed", "4", "--param", "n_pairs=4", "-p", "n_keys=8", "-p", "n_values=8")
    assert r.exit_code == 0, r.output
    assert "'n_pairs': 4" in r.output
    lines = [line for line in r.output.splitlines() if line.startswith("[")]
    assert len(lines) == 3 and all(len(line.split()) == 1 + 13 for line in lines)  # "[i]" + 13 tokens
    roles = re.findall(r"key@(\d+)=(k\d+)\s+value@(\d+)=(v\d+)\s+sep@(\d+)=<eos>\s+query@(\d+)=(k\d+)", r.output)
    answers = re.findall(r"answer: (v\d+) \(predicted at (\d+)\)", r.output)
    assert len(roles) == 3 and len(answers) == 3
    for (kp, k, vp, v, sep, qp, q), (a, ap) in zip(roles, answers):
        assert k == q and v == a and int(vp) == int(kp) + 1 and int(qp) == int(sep) + 1 == int(ap)


def test_show_atr_prints_the_tree():
    r = run("show", "atr", "--n", "2", "--seed", "1")
    assert r.exit_code == 0, r.output
    assert r.output.count("[key]") == 2 and r.output.count("[value]") == 2
    assert "└── " in r.output and "answer: t" in r.output


def test_show_mqar_lists_every_query():
    r = run("show", "mqar", "--n", "1", "-p", "seq_len=32", "-p", "n_pairs=4")
    assert r.exit_code == 0, r.output
    assert r.output.count("query@") == 4 and r.output.count("predicted at") == 4


def test_stats_atr_reports_published_figures():
    r = run("stats", "atr", "--n", "512")
    assert r.exit_code == 0, r.output
    for name in ("length", "context", "kv_distance", "depth", "published", "mean≈20", "chance accuracy"):
        assert name in r.output
    mean_length = float(re.search(r"length\s+│\s+([\d.]+)", r.output).group(1))
    assert 16 < mean_length < 24


def test_stats_ar_is_constant_length():
    r = run("stats", "ar", "-p", "n_pairs=8", "-p", "n_keys=64", "-p", "n_values=64", "--n", "64")
    assert r.exit_code == 0, r.output
    assert re.search(r"length\s+│\s+21\.00\s+│\s+0\.00", r.output)
    assert re.search(r"kv_distance\s+│\s+1\.00", r.output)


@pytest.mark.parametrize(
    "args, message",
    [
        (["show", "ar", "-p", "n_pairs=0"], "n_pairs"),
        (["show", "nope"], "unknown task"),
        (["show", "ar", "--set", "n_pairs"], "key=value"),
        (["stats", "atr", "-p", "grammar=hard"], "grammar"),
        (["show", "atr", "--split", "heldout"], "not a split"),
    ],
)
def test_errors_name_the_problem(args, message):
    r = run(*args)
    assert r.exit_code != 0 and message in r.output


def test_param_values_are_typed():
    assert parse_overrides(["a=8", "b=0.2", "c=easy"]) == {"a": 8, "b": 0.2, "c": "easy"}


@pytest.mark.parametrize("command", [[], ["study"], ["train"], ["intervene"], ["report"]])
def test_help_reads_like_an_ordinary_cli(command):
    """Flags show no `<bool>` type in --help; options that take a value keep theirs."""
    out = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "120"}).output
    assert "--help" in out
    assert "<bool>" not in out


def test_old_override_spelling_still_works_with_a_note():
    r = run("show", "ar", "-p", "n_pairs=4", "--n", "1")
    assert r.exit_code == 0 and "'n_pairs': 4" in r.output and "deprecated; use --set" in r.output
    assert "'n_pairs': 5" in run("show", "ar", "--set", "n_pairs=5", "--n", "1").output
