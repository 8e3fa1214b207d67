"""check-mixer: the conformance suite passes on the zoo and fails, with the right reason, on broken mixers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.models.conformance import check_mixer
from mecheval.models.mixers import ZOO

MODULES = Path(__file__).parent / "modules"
NO_SLOT = {"attention", "based"}  # mixers without a convolution slot


@pytest.fixture(autouse=True)
def modules_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(MODULES))


def results(checks) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.reason) for c in checks}


@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_mixer_conforms(name):
    got = results(check_mixer(name, learn=False))
    skipped = {"learns"} | ({"conv slot"} if name in NO_SLOT else set())
    assert {k for k, (s, _) in got.items() if s == "skip"} == skipped, got
    assert all(s == "pass" for k, (s, _) in got.items() if k not in skipped), got


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_mixer_learns_a_tiny_ar_batch(name):
    from mecheval.models.conformance import Suite, run_check
    from mecheval.models.mixers import mixer_spec

    check = run_check("learns", Suite(name, mixer_spec(name), {}, 0).learns)
    assert check.status == "pass", check.reason


def test_a_correct_plugin_passes_every_check():
    got = results(check_mixer("broken_mixers:CumMean", learn=False))
    assert got["conv slot"][0] == "skip" and got["learns"][0] == "skip"
    assert all(s == "pass" for k, (s, _) in got.items() if k not in ("conv slot", "learns")), got


@pytest.mark.parametrize(
    "mixer, failing, reason",
    [
        ("NonCausal", {"causal", "recurrent"}, r"outputs up to t=0 change by .* when only later inputs change"),
        ("StepDiffers", {"recurrent"}, r"the step form differs from the parallel form from t=1 "),
        ("DeadParameter", {"gradients"}, r"^no gradient reaches forgotten$"),
        ("SitesOutOfOrder", {"sites"}, r"visits the sites in the order \['layers.0.core_out', 'layers.0.late_out'\]"),
    ],
)
def test_a_broken_mixer_fails_with_the_right_reason(mixer, failing, reason):
    got = results(check_mixer(f"broken_mixers:{mixer}", learn=False))
    assert {k for k, (s, _) in got.items() if s == "fail"} == failing, got
    first = sorted(failing, key=list(got).index)[0]
    assert re.search(reason, got[first][1]), got[first]


def test_the_command_prints_the_table_and_exits_1_on_failure():
    result = CliRunner().invoke(app, ["check-mixer", "broken_mixers:DeadParameter", "--no-learn"])
    assert result.exit_code == 1
    assert "no gradient reaches forgotten" in result.output and "gradients" in result.output
    ok = CliRunner().invoke(app, ["check-mixer", "broken_mixers:CumMean", "--no-learn"])
    assert ok.exit_code == 0, ok.output


def test_options_reach_the_mixer():
    bad = CliRunner().invoke(app, ["check-mixer", "attention", "--no-learn", "-o", "n_heads=3"])
    assert bad.exit_code == 1 and "n_heads=3 does not divide d_model" in bad.output
    assert CliRunner().invoke(app, ["check-mixer", "attention", "--no-learn", "-o", "n_heads=2"]).exit_code == 0


def test_a_wrong_first_order_state_product_fails_the_sites_check(monkeypatch):
    """A state whose `_first_order` (what attribution patching reads) is off by a factor is caught."""
    from mecheval.models.mixers.h3 import H3State

    right = H3State._first_order
    monkeypatch.setattr(H3State, "_first_order", lambda self, *a: [2 * x for x in right(self, *a)])
    got = results(check_mixer("h3", learn=False))
    assert got["sites"][0] == "fail" and "is not the derivative along the patch" in got["sites"][1], got["sites"]
