"""`study_command`: the command line that makes a study directory, read back from its files."""

import json
import shlex
from pathlib import Path

import pytest
import typer
import yaml

from mecheval.cli import app
from mecheval.study import STUDIES
from mecheval.study.command import rebuilds_spec, study_axes, study_command

ROOT = Path(__file__).resolve().parents[2]


def _study(tmp_path: Path, preset: str, scale: str, archs: list[str] | None = None, **axes) -> Path:
    """A study directory as `run_study` leaves it, without runs: sweep.yaml and study.json."""
    spec = STUDIES[preset].sweep(scale, archs=archs, **axes)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (tmp_path / "study.json").write_text(json.dumps({"preset": preset, "scale": scale, "archs": archs}))
    return tmp_path


def _parses(command: str) -> dict:
    """The options `mecheval study` reads from the command line (parsed by the real CLI, not run)."""
    ctx = typer.main.get_command(app).commands["study"].make_context("study", shlex.split(command)[2:])
    return ctx.params


def test_the_command_names_each_axis_and_rebuilds_the_spec(tmp_path):
    study = _study(tmp_path, "atr-mamba-noconv", "paper", archs=["mamba (d_conv 0)"], widths=[64], lrs=[3e-3],
                   grammars=["large_vocab"])
    command = study_command(study, out="results/x")
    assert command == ("mecheval study atr-mamba-noconv --scale paper --widths 64 --lrs 0.003 --grammars large_vocab "
                       "--archs 'mamba (d_conv 0)' --out results/x")
    assert rebuilds_spec(study) is True
    params = _parses(command)
    assert params["archs"] == ["mamba (d_conv 0)"] and params["grammars"] == ["large_vocab"] and params["scale"] == "paper"


def test_the_command_names_the_published_grammar_draw(tmp_path):
    study = _study(tmp_path, "atr-mamba-noconv", "paper", archs=["attention", "mamba"], widths=[64], grammar_draw="published")
    command = study_command(study, out="results/x")
    assert command == ("mecheval study atr-mamba-noconv --scale paper --widths 64 --archs attention,mamba "
                       "--grammar-draw published --out results/x")
    assert rebuilds_spec(study) is True and study_axes(command)[2]["grammar_draw"] == "published"
    assert _parses(command)["grammar_draw"] == "published"


def test_the_command_names_a_build_other_than_the_scales(tmp_path):
    study = _study(tmp_path / "a", "atr", "paper", archs=["attention"], widths=[64], lrs=[1e-3], grammars=["easy"],
                   build="study")
    command = study_command(study, out="results/x")
    assert command == ("mecheval study atr --scale paper --widths 64 --lrs 0.001 --grammars easy --archs attention "
                       "--build study --out results/x")
    assert rebuilds_spec(study) is True and _parses(command)["build"] == "study"
    # Mamba's paper-scale default is the study's build: the command does not name it
    default = _study(tmp_path / "b", "atr", "paper", archs=["mamba"], widths=[64], grammars=["easy"])
    assert "--build" not in study_command(default) and rebuilds_spec(default) is True
    with pytest.raises(ValueError, match="hyena: build 'study' is the study's code's LM of mamba, attention, based, baseconv models only"):
        STUDIES["atr"].sweep("paper", archs=["hyena"], build="study")


def test_early_stop_seeds_and_a_changed_preset(tmp_path):
    study = _study(tmp_path, "ar-mamba-conv", "paper", archs=["mamba (d_conv 2)", "mamba (d_conv 3)"], widths=[32],
                   lrs=[1e-2], seeds=[1, 2], early_stop=True)
    preset, scale, axes = study_axes(study_command(study))
    assert (preset, scale) == ("ar-mamba-conv", "paper")
    assert axes == {"widths": [32], "lrs": [0.01], "seeds": [1, 2], "archs": ["mamba (d_conv 2)", "mamba (d_conv 3)"],
                    "early_stop": True, "train_order": None}
    assert rebuilds_spec(study) is True
    spec = yaml.safe_load((study / "sweep.yaml").read_text())
    spec["base"]["steps"] = 1000  # the preset has changed since the study ran
    (study / "sweep.yaml").write_text(yaml.safe_dump(spec))
    assert rebuilds_spec(study) is False


def test_the_whole_preset_needs_no_archs_and_an_older_spec_names_its_order(tmp_path):
    study = _study(tmp_path, "quick", "cpu")
    assert "--archs" not in study_command(study) and rebuilds_spec(study) is True
    old = _study(tmp_path / "old", "ar-architectures", "paper", widths=[64])
    spec = yaml.safe_load((old / "sweep.yaml").read_text())
    del spec["base"]["train_order"]  # written before the field: a fresh order each epoch (ADDED_LATER)
    (old / "sweep.yaml").write_text(yaml.safe_dump(spec))
    assert "--train-order shuffle" in study_command(old)


def test_a_plugin_is_not_imported_to_check_the_spec(tmp_path):
    study = _study(tmp_path, "quick", "cpu")
    meta = json.loads((study / "study.json").read_text()) | {"archs": ["nowhere.module:Mixer"]}
    (study / "study.json").write_text(json.dumps(meta))
    assert "nowhere.module:Mixer" in study_command(study)
    assert rebuilds_spec(study) is None
    assert study_command(tmp_path / "missing") is None


@pytest.mark.parametrize("name", ["paper-d64/atr-large-vocab-noconv", "paper-d64/atr-generalisation",
                                  "paper-d32/ar-mamba-conv"])
def test_committed_studies_are_remade_by_their_command(name):
    study = ROOT / "results" / name
    assert rebuilds_spec(study) is True
    _parses(study_command(study))


def test_study_passes_its_trackers_to_every_run_and_names_them_in_its_command(tmp_path, monkeypatch):
    """`study --tensorboard` puts the tracker into every run's config (loggers.tensorboard), checks the package
    before any run starts, and the study's command line says so (and rebuilds the spec)."""
    import sys
    import types

    from typer.testing import CliRunner

    import mecheval.report.terminal
    import mecheval.study
    from mecheval.sweeps import SweepConfig
    from mecheval.sweeps.spec import expand

    calls = []  # (preset, scale, the axes of Study.sweep) of each run_study called

    def run_study(preset, out, scale, executor, workers, address, n_examples, quiet, new, cohort, **axes):
        calls.append((preset, scale, axes))

    monkeypatch.setattr(mecheval.study, "run_study", run_study)
    monkeypatch.setattr(mecheval.report.terminal, "print_summary", lambda *a: None)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # not installed
    missing = CliRunner().invoke(app, ["study", "quick", "--out", str(tmp_path / "q"), "--tensorboard"])
    assert missing.exit_code == 2 and "--tensorboard" in missing.output and "mecheval[loggers]" in missing.output
    assert calls == [] and not (tmp_path / "q").exists()

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=object))
    result = CliRunner().invoke(app, ["study", "quick", "--out", str(tmp_path / "q"), "--tensorboard"])
    assert result.exit_code == 0, result.output
    preset, scale, axes = calls[0]
    assert axes["trackers"] == ["tensorboard"]
    runs = expand(SweepConfig.model_validate(STUDIES[preset].sweep(scale, **axes)))
    assert runs and all(r.config.loggers.tensorboard and not r.config.loggers.wandb for r in runs)

    study = _study(tmp_path / "made", "quick", "cpu", trackers=["tensorboard"])
    command = study_command(study)
    assert command.endswith("--tensorboard --out " + str(study))
    assert _parses(command)["tensorboard"] is True and rebuilds_spec(study) is True
