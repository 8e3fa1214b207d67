"""The readout spec (`interventions.spec.ReadoutSpec`): the CLI's defaults, the options of attribution patching
only with that method, unknown analyses and fields refused, each in one line naming the field (on the command
line, the flag); every study's readout a valid spec."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from mecheval.common import N_EXAMPLES
from mecheval.errors import MechevalError
from mecheval.interventions.spec import ANALYSES, GradientOptions, ReadoutSpec, ReadoutSpecError


def test_the_defaults_are_the_commands():
    spec = ReadoutSpec()
    assert (spec.corrupt, spec.n, spec.sites, spec.positions, spec.seed, spec.split) == (("key",), N_EXAMPLES, ("*",), None, 0, "test")
    assert (spec.direction, spec.method, spec.gradient, spec.verify, spec.analyses) == ("sufficiency", "exact", None, 0, ())
    assert spec.labelled and spec.analysed_role == "key"
    assert not ReadoutSpec(corrupt=["value"]).labelled and ReadoutSpec(corrupt=["value", "key"]).analysed_role == "key"
    assert not ReadoutSpec(direction="necessity").labelled


def test_gradient_options_come_with_the_gradient_method_only():
    assert ReadoutSpec(method="gradient", gradient=GradientOptions(verify=8)).verify == 8
    assert ReadoutSpec(method="gradient", gradient={"verify": 8}) == ReadoutSpec(method="gradient", gradient=GradientOptions(verify=8))
    assert ReadoutSpec(method="gradient").verify == 0  # the default options
    with pytest.raises(ReadoutSpecError, match=r"^ReadoutSpec: gradient: .*`method='gradient'`, not 'exact'$") as e:
        ReadoutSpec(gradient=GradientOptions(verify=2))
    assert e.value.field == "gradient" and isinstance(e.value, (MechevalError, ValueError))
    with pytest.raises(ReadoutSpecError, match="verify") as e:
        GradientOptions(verify=-1)
    assert e.value.field == "verify"


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"analyses": ["conv-window", "bogus"]}, "analyses", "'bogus'"),
    ({"method": "guess"}, "method", "'guess'"),
    ({"direction": "both"}, "direction", "'both'"),
    ({"corrupt": []}, "corrupt", "at least 1"),
    ({"n": 0}, "n", "greater than or equal to 1"),
    ({"n": True}, "n", "boolean"),
    ({"verify": 2}, "verify", "Extra inputs"),  # nested in `gradient`
    ({"min_effect": float("nan")}, "min_effect", "finite"),
])
def test_a_bad_field_is_refused_in_one_line_naming_it(fields, field, words):
    with pytest.raises(ReadoutSpecError) as e:
        ReadoutSpec(**fields)
    assert e.value.field == field and words in str(e.value) and "\n" not in str(e.value)


def test_analyses_are_the_known_ones():
    assert ReadoutSpec(analyses=list(ANALYSES)).analyses == ANALYSES


def test_a_spec_is_frozen():
    spec = ReadoutSpec()
    with pytest.raises(ValueError):
        spec.n = 1


def test_every_studys_readout_is_a_valid_spec():
    from mecheval.study.presets import STUDIES

    for study in STUDIES.values():
        spec = study.readout(N_EXAMPLES)
        assert (spec.corrupt, spec.sites, spec.min_effect, spec.analyses) == (study.corrupt, study.sites,
                                                                              study.min_effect, study.analyses)
        assert spec.skip_missing_sites and study.readout(N_EXAMPLES, skip=("state",)).analyses == tuple(
            a for a in study.analyses if a != "state")
        for split in study.splits:  # a further split is read without the analyses
            assert study.readout(N_EXAMPLES, split).analyses == () and study.readout(N_EXAMPLES, split).split == split


@pytest.mark.parametrize(("args", "flag"), [(["--analysis", "bogus"], "--analysis"), (["--verify", "2"], "--verify"),
                                             (["--corrupt", ","], "--corrupt")])
def test_the_command_names_the_flag_of_a_bad_field(tmp_path, args, flag):
    from mecheval.commands import intervene

    app = typer.Typer()
    intervene.register(app)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["intervene", str(tmp_path), *args], terminal_width=240)
    assert result.exit_code == 2 and flag in result.output, result.output
    assert "ReadoutSpec" in result.output and not any(tmp_path.iterdir())
