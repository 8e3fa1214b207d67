"""Bad input refused before it costs anything (issue 56): a YAML alias bomb, sizes no machine holds, a weights
file larger than its model. Each is one line naming the file or field, and comes at once."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mecheval.cli import app
from mecheval.common import ConfigError
from mecheval.training.config import read_yaml

# "billion laughs": nine references per level, nine levels: 9**9 strings once expanded
BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))


def cli(*args) -> "CliRunner.Result":
    return CliRunner().invoke(app, [str(a) for a in args])


def in_a_process(*args, timeout_s: float = 30) -> subprocess.CompletedProcess:
    """`mecheval ARGS` in its own process (one that hangs is killed: the test fails, the suite goes on)."""
    return subprocess.run([sys.executable, "-m", "mecheval.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout_s)


def test_a_yaml_alias_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=rf"^{path}: line 2: a YAML alias \(\*a\); aliases are refused"):
        read_yaml(path)
    assert time.perf_counter() - start < 1


def test_a_value_written_twice_is_dumped_without_an_alias():
    from mecheval.common import dump_yaml

    shared = [1, 2]
    assert "&" not in dump_yaml({"a": shared, "b": shared})


def test_an_alias_in_an_override_is_refused(tiny_run, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_run))
    result = cli("train", config, "--set", "eval.splits=[&x test, *x]", "--out", tmp_path / "run", "--quiet")
    assert result.exit_code == 2, result.output
    assert "override 'eval.splits=[&x test, *x]': line 1: a YAML alias (*x)" in result.output
    assert not (tmp_path / "run").exists()


def test_an_alias_bomb_in_a_config_fails_train_at_once(tiny_run, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_run) + BOMB)
    result = in_a_process("train", config, "--out", tmp_path / "run", "--quiet")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {config}: line ") and "aliases are refused" in result.stderr
    assert not (tmp_path / "run").exists()


def _add_tensor_header(path: Path, name: str, shape: tuple[int, ...]) -> None:
    """Rewrites the safetensors file `path` with a further F32 tensor `name` of `shape` whose data is a hole
    (a sparse file: its size on disk stays small, reading it would allocate it all)."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    size = 4 * math.prod(shape)
    header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [len(data), len(data) + size]}
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded + data)
        f.truncate(8 + len(encoded) + len(data) + size)


@pytest.fixture
def finished(tmp_path, tiny_run) -> Path:
    from mecheval.training import train, validate_config

    train(validate_config(tiny_run), tmp_path / "run", quiet=True)
    return tmp_path / "run"


def test_a_huge_tensor_planted_in_the_weights_is_refused_unread(finished):
    from mecheval.training import load_run
    from mecheval.training.checkpoint import CheckpointError

    _add_tensor_header(finished / "model.safetensors", "planted", (4, 2**30))  # 16 GiB
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=r"unexpected: \['planted'\] \(17,179,869,184 bytes"):
        load_run(finished)
    assert time.perf_counter() - start < 2


@pytest.mark.parametrize("overrides, says", [
    (["model.vocab_size=2000000000"], "model.vocab_size: Input should be less than or equal to 1048576"),
    (["task.params.n_keys=1000000000"], "model.vocab_size: Input should be less than or equal to 1048576"),
    (["model.max_len=2000000000"], "model.max_len: Input should be less than or equal to 131072"),
    (["task.params.n_pairs=300000", "task.params.n_keys=300000", "task.params.n_values=300000"],
     "n_pairs\n  Input should be less than or equal to 8189"),
    (["model.d_model=1000000"], "model.d_model: Input should be less than or equal to 16384"),
    (["model.vocab_size=1000000", "model.d_model=16000"],
     "vocab_size × d_model = 16,000,000,000 embedding values, at most 1,073,741,824"),
    (["batch_size=1000000000"], "batch_size: Input should be less than or equal to 65536"),
    (["eval.size=1000000000"], "eval.size: Input should be less than or equal to 4194304"),
])
def test_sizes_no_machine_holds_are_refused_before_allocating(tiny_run, tmp_path, overrides, says):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_run))
    start = time.perf_counter()
    result = cli("train", config, *(a for o in overrides for a in ("--set", o)), "--out", tmp_path / "run", "--quiet")
    assert time.perf_counter() - start < 2
    assert result.exit_code == 2 and says in result.output, result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["intervene", "study"])
def test_a_huge_n_is_refused_before_reading(tmp_path, command):
    target = ["nonesuch", "--out", tmp_path / "s"] if command == "study" else [tmp_path]  # refused before either is read
    result = cli(command, *target, "--n", "1000000000")
    assert result.exit_code == 2 and "less than or equal to 65536" in result.output, result.output
