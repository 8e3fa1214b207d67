"""The README's quick start runs top to bottom as written: its command-line block, then its Python block, in one
fresh directory (the training config shortened, under the name the README gives it), and it states the true
defaults."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.common import N_EXAMPLES

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "examples/train_ar_attention.yaml"
LONG = ("study", "report")  # the commands on a whole study (minutes), not on the quick start's run


def quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("## Quick start"):readme.index("\n## ", readme.index("## Quick start") + 1)]


def test_the_quick_start_runs_top_to_bottom(tmp_path, monkeypatch):
    section = quick_start()
    bash = re.search(r"```bash\n(.*?)```", section, re.S)[1]
    python = re.search(r"```python\n(.*?)```", section, re.S)[1]
    config = yaml.safe_load((ROOT / CONFIG).read_text())
    config |= {"steps": 20, "eval": {"every": 10, "size": 32}, "checkpoint_every": 10}
    (tmp_path / "examples").mkdir()
    (tmp_path / CONFIG).write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    commands = [shlex.split(line, comments=True) for line in bash.splitlines()]
    commands = [c for c in commands if c and c[0] == "mecheval" and c[1] not in LONG]
    assert [c[1] for c in commands] == ["data", "train", "intervene", "intervene"]
    for command in commands:
        result = CliRunner().invoke(app, command[1:])
        assert result.exit_code == 0, (command, result.output)
    namespace: dict = {}
    exec(compile(python, "README.md (quick start)", "exec"), namespace)
    assert namespace["verdict"].n > 0 and not namespace["table"].empty


def test_the_quick_start_states_the_default_number_of_examples():
    section = quick_start()
    assert f"{N_EXAMPLES:,} test examples" in section and "n=1024" not in section
    assert f"{N_EXAMPLES:,} test examples" in (ROOT / "docs/getting-started.md").read_text()


def test_a_run_trained_twice_names_the_callers_argument(tmp_path, tiny_run):
    """In Python the error names Python's arguments (`resume=True`, `run_dir`); on the command line, the flags."""
    import pytest

    from mecheval.training import RunExistsError, TrainConfig, train

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_run))
    run = tmp_path / "run"
    train(TrainConfig.model_validate(tiny_run), run, quiet=True)
    with pytest.raises(RunExistsError, match=r"resume it \(`resume=True`\) or choose another `run_dir`") as e:
        train(TrainConfig.model_validate(tiny_run), run, quiet=True)
    assert "--" not in str(e.value)
    result = CliRunner().invoke(app, ["train", str(config), "--out", str(run), "--quiet"])
    assert result.exit_code == 2 and "resume it (--resume) or choose another --out" in result.output, result.output
