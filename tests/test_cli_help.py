"""Every command's --help: an example, choices listed, required options marked, list options in one style."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from mecheval.cli import app


def commands(group, path=()):
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):  # a group (typer's click or its vendored copy)
            yield from commands(cmd, (*path, name))
        else:
            yield (*path, name)


ALL = list(commands(typer.main.get_command(app)))


def help_of(*path: str) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_is_listed():
    assert {"intervene", "study", "train", "report", "check-mixer"} <= {p[-1] for p in ALL} and ("data", "show") in ALL


@pytest.mark.parametrize("path", [(), *ALL], ids=lambda p: " ".join(p) or "mecheval")
def test_help_shows_an_example(path):
    out = help_of(*path)
    assert "Examples:" in out and f"mecheval {' '.join(path)}".strip() in out.split("Examples:")[1]


def test_choices_and_required_options_are_shown():
    assert "<sufficiency|necessity>" in help_of("intervene") and "<exact|gradient>" in help_of("intervene")
    study = help_of("study")
    assert "<cpu|paper>" in study and "<local|ray>" in study and "<replay|shuffle>" in study
    assert "Required (except with --list)" in study
    assert "[required]" in help_of("train")


def test_list_options_take_commas_or_repeats(monkeypatch):
    from mecheval.commands.options import split_list

    assert split_list(["a,b", "c"]) == ["a", "b", "c"] and split_list(None) is None
    seen = {}
    monkeypatch.setattr("mecheval.study.run_study", lambda *a, **kw: seen.update(kw))
    monkeypatch.setattr("mecheval.report.terminal.print_summary", lambda *a: None)
    args = ["study", "quick", "--out", "/nonexistent/x", "--seeds", "0,1", "--seeds", "2", "--archs", "attention,mamba"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen["seeds"] == [0, 1, 2] and seen["archs"] == ["attention", "mamba"]


def test_the_cli_loads_where_typer_lacks_the_help_hook():
    """The flag-type tweak patches a typer internal that some typer versions (0.27, a GPU image's) lack:
    the CLI must load and run there, with typer's own help."""
    import subprocess
    import sys

    code = ("import typer.core as c\n"
            "if hasattr(c.TyperOption, 'display_type_rich'): del c.TyperOption.display_type_rich\n"
            "import sys; from mecheval.cli import main; sys.argv = ['mecheval', 'study', '--list']; main()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ar-architectures" in out.stdout
