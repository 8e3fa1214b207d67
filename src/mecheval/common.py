"""Helpers several packages use: safe atomic file writes and checked reads (JSON, YAML without aliases, Parquet),
numbers in configs, dotted config keys (nothing of mecheval imported at load but `mecheval.errors`)."""

from __future__ import annotations

import contextlib
import json
import os
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from mecheval.errors import MechevalError


N_EXAMPLES = 512  # examples per intervention readout: the API's (`interventions.N_EXAMPLES`), `intervene`'s and `study`'s
MAX_N_EXAMPLES = 2**16  # the most `--n` takes: every readout holds n examples (and their activations) at once


class ConfigError(MechevalError, ValueError):
    """A config that cannot be read or validated; the message names the field(s) at fault."""


NUMBER = (int, float)  # a JSON number (a bool is none: `read_json_object`)
MAX_INT = 2**53  # no integer of a config is larger: beyond it a float is no exact integer (`steps: 1e20` is refused, not run)


def _numeric(annotation: Any) -> set[type]:
    """int and/or float among the types a field annotation allows."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else (annotation,)
    return {a for a in args if a in (int, float)}


class Checked(BaseModel):
    """A pydantic model whose numbers are numbers: a boolean is not accepted for a number (YAML `true` is
    not 1), an integer is at most MAX_INT, and a float is finite (no `.inf` / `.nan`)."""

    model_config = ConfigDict(allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers(cls, value: Any, info: ValidationInfo) -> Any:
        kinds = _numeric(cls.model_fields[info.field_name].annotation)
        if kinds and isinstance(value, bool):
            raise ValueError(f"a boolean is not a number (got {value})")
        if kinds == {int} and isinstance(value, (int, float)) and abs(value) > MAX_INT:
            raise ValueError(f"must be at most {MAX_INT}, got {value:g}")
        return value


class UnsafePathError(MechevalError, OSError):
    """A write that would follow a symbolic link, or leave the directory it belongs to."""


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path))  # normalised, symlinks not resolved


def check_inside(path: Path, root: Path | None = None) -> Path:
    """`path` (absolute) if writing it stays in `root` (default: its parent): it lies under `root` and no
    component below `root`, the file itself included, is a symbolic link; else UnsafePathError naming it.
    `root` itself may be a link (the user chose it)."""
    path = _absolute(path)
    root = path.parent if root is None else _absolute(root)
    if path == root or root not in path.parents:
        raise UnsafePathError(f"{path}: outside {root}; refused to write")
    node = root
    for part in path.relative_to(root).parts:
        node = node / part
        if node.is_symlink():
            raise UnsafePathError(f"{node}: a symbolic link in a results directory; refused to write through it "
                                  f"(remove the link and run again)")
    return path


def safe_mkdir(path: Path, root: Path) -> Path:
    """The directory `path` under `root` (or `root` itself), created where missing, never through a symbolic link."""
    path = _absolute(path) if _absolute(path) == _absolute(root) else check_inside(path, root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def replacing(path: Path, root: Path | None = None) -> Iterator[Path]:
    """Yields a temporary path beside `path` to write; then flushes it to disk and renames it over
    `path`. A failed write (a full disk) removes the temporary file and leaves `path` as it was.
    `path` must stay inside `root` without a symbolic link on the way (`check_inside`)."""
    path = check_inside(path, root)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)  # a killed writer's, or a link planted there
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes, root: Path | None = None) -> None:
    """Writes `data` to `path` whole or not at all, never through a symbolic link (see `replacing`):
    every write into a run or study directory goes through here, with that directory as `root`."""
    with replacing(path, root) as tmp, open(tmp, "xb") as f:
        f.write(data)


def atomic_write_text(path: Path, text: str, root: Path | None = None) -> None:
    atomic_write_bytes(path, text.encode(), root)


def safe_unlink(path: Path, root: Path) -> None:
    """Removes the file `path` under `root` (a link there is removed itself, never what it points to)."""
    path = _absolute(path)
    if path.parent != _absolute(root):
        check_inside(path.parent, root)
    path.unlink(missing_ok=True)


def read_json_object(path: Path, fields: dict[str, type | tuple[type, ...]],
                     optional: dict[str, type | tuple[type, ...]] | None = None) -> dict:
    """The JSON object in `path` with each of `fields` present and of its type(s), and each of `optional`
    of its type(s) where present (bools are not numbers); ConfigError naming the file otherwise (empty,
    truncated, not an object, wrong types)."""
    try:
        data = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
    checked = {**fields, **{k: v for k, v in (optional or {}).items() if k in data}}
    for name, kinds in checked.items():
        value = data.get(name)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in _tuple(kinds))
        if not ok:
            raise ConfigError(f"{path}: field {name!r} is {value!r}, expected {_names(kinds)}")
    return data


class _NoAliases(yaml.SafeLoader):
    """PyYAML's safe loader refusing aliases (`*name`): an alias bomb ("billion laughs") expands to more data
    than memory holds, and no file mecheval writes or reads has one."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise ConfigError(f"line {mark.line + 1}: a YAML alias (*{self.peek_event().anchor}); aliases are refused, "
                              "write the value out")
        return super().compose_node(parent, index)


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:  # a value written twice is written out twice, as `load_yaml` reads it
        return True


def load_yaml(text: str, source: str) -> Any:
    """The data of YAML `text` (safe types only, no aliases: `_NoAliases`); ConfigError naming `source` (a file,
    an override) otherwise. Every YAML mecheval reads goes through here."""
    try:
        return yaml.load(text, Loader=_NoAliases)  # noqa: S506 (a SafeLoader)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None


def dump_yaml(data: Any) -> str:
    """`data` as YAML `load_yaml` reads back (no aliases), keys in their order."""
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False)


def read_table(path: Path, columns: Sequence[str]):
    """The parquet table at `path` (a pandas DataFrame) holding `columns`; ConfigError naming the file where it
    is no parquet table or lacks one of them (a file of another version, or planted)."""
    import pandas as pd

    try:
        table = pd.read_parquet(path)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise ConfigError(f"{path}: not a readable parquet table ({e})") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ConfigError(f"{path}: lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
                          "write it again (`mecheval intervene`)")
    return table


def _tuple(kinds) -> tuple:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _names(kinds) -> str:
    return " or ".join("null" if k is type(None) else k.__name__ for k in _tuple(kinds))


def format_validation_error(e: ValidationError, sep: str = "\n") -> str:
    """`field.path: message` per error, joined by `sep` (the model's kind, a tag of the `model` union, is not
    part of the field's name)."""
    lines = []
    for err in e.errors():
        loc = ".".join(str(p) for i, p in enumerate(err["loc"]) if not (i == 1 and err["loc"][0] == "model" and p in ("lm", "hf")))
        lines.append(f"{loc or '(config)'}: {err['msg']}")
    return sep.join(lines)


def set_dotted(data: dict, key: str, value: Any) -> None:
    """data[a][b] = value for key "a.b", creating dicts on the way; an error where a non-dict is in the way."""
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(f"bad key {key!r}")
    node = data
    for i, p in enumerate(parts[:-1]):
        child = node.setdefault(p, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {key!r}: {'.'.join(parts[: i + 1])} is {child!r}, not a mapping")
        node = child
    node[parts[-1]] = value


def flatten(d: dict, prefix: str = "") -> dict:
    """The inverse of `set_dotted`: {"a": {"b": 1}} -> {"a.b": 1}; lists (and empty dicts) become JSON strings."""
    out = {}
    for key, value in d.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, (list, tuple, dict)) else value
    return out

