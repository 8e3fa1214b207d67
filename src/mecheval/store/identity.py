"""A run's identity in a study: its architecture (label, name, convolution, depth, position embedding) and its
comparison group (the runs the best learning rate is chosen among: the same config but for learning rate and seed).

A sweep records it when it makes a run, in RUN/run.json (`record`), from the run's resolved config; the
reports read it from there (`recorded`). Runs made before run.json existed (the hundreds committed under
results/, and `mecheval train` runs) have none: theirs is derived from config.yaml by the same rules
(`derive`), and a table mixing the two groups its runs by the derivation (`sweeps.table.best_lr`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from mecheval.common import atomic_write_text, flatten, read_json_object, safe_mkdir
from mecheval.intervals import missing
from mecheval.models.mixers import MIXERS, mixer_label
from mecheval.models.presets import PUBLISHED_LAYERS, arch_label
from mecheval.plugins import is_import_path
from mecheval.store.files import read_once
from mecheval.training.config import TrainConfig

RUN_JSON = "run.json"
LR, SEED = "optim.lr", "seed"  # what varies within a comparison group


@dataclass(frozen=True)
class Identity:
    """What reports name a run by and compare it with; `arch` is `arch_label(arch_name, arch_conv, layers,
    positions, ablations)`, the join key into the findings and the published tables."""

    arch: str
    arch_name: str
    arch_conv: int | str | None  # None: the architecture's published default
    layers: int | None  # None: the published depth
    positions: str | None  # None: the preset's position embedding
    group: str | None  # equal for runs alike but for learning rate and seed; None where not recorded
    ablations: tuple[str, ...] = ()  # the mixers' terms it was trained without (`arch_ablations`)


def _label(mixer: str) -> str:
    """A mixer as reports name it: its zoo name, or a plug-in's class name in lower case (its code is not
    imported to read results)."""
    return mixer.rpartition(":")[2].rpartition(".")[2].lower() if is_import_path(mixer) else mixer_label(mixer)


@functools.lru_cache(maxsize=None)
def _default_convs(preset: str, mixers: str, n_layers: int) -> tuple:
    from mecheval.models import ModelConfig

    data = {"preset": preset} if preset else {"mixer": json.loads(mixers)}
    return tuple(ModelConfig(vocab_size=1, n_layers=n_layers, **data).d_conv)


@functools.lru_cache(maxsize=None)
def _default_positions(preset: str) -> str:
    from mecheval.models import ModelConfig

    return ModelConfig(vocab_size=1, preset=preset).pos_emb


def arch_parts(config: Mapping) -> tuple[str, int | str | None]:
    """A run's architecture from its flattened config: (name, conv). The name is the preset, or the mixers
    joined by `+` (a plug-in by its class name); conv is the first layer's convolution that differs from that
    architecture's published default, None where none does (always None with a plug-in mixer, whose default
    reading results does not import). A transformers model (`model.hf`) is `hf:` and its class name, conv None."""
    hf = config.get("model.hf")
    if isinstance(hf, str):
        return f"hf:{hf.rpartition(':')[2]}", None
    preset = config.get("model.preset")
    preset = preset if isinstance(preset, str) else None
    mixers = json.loads(config["model.mixer"])
    name = preset or "+".join(dict.fromkeys(_label(m) for m in mixers))
    convs = json.loads(config["model.d_conv"])
    if any(is_import_path(m) for m in mixers):
        return name, None
    if int(config["model.n_layers"]) != PUBLISHED_LAYERS:  # a depth variant's convs are its depth's (`arch_variant`)
        return name, None
    default = _default_convs(preset or "", config["model.mixer"], PUBLISHED_LAYERS)
    changed = [c for c, d in zip(convs, default) if c != d]
    return name, changed[0] if changed else None


def arch_variant(config: Mapping) -> tuple[int | None, str | None]:
    """(layers, positions) of a preset's run where they differ from the published design: its depth where
    not 2 layers, its position embedding ("learned" / "none") where not the preset's; None where they do
    not differ (and for runs without a preset)."""
    preset = config.get("model.preset")
    if not isinstance(preset, str):
        return None, None
    layers = int(config["model.n_layers"])
    positions = config.get("model.pos_emb")
    return (layers if layers != PUBLISHED_LAYERS else None,
            positions if isinstance(positions, str) and positions != _default_positions(preset) else None)


def arch_ablations(config: Mapping) -> tuple[str, ...]:
    """The training ablations of a run's zoo mixers (`MixerOptions.ablations` of the options its flattened
    config sets, such as `model.options.mamba3.two_token: false` -> `no two-token`), in the order of the
    mixers' layers; () for a transformers model and for plug-in mixers. `config` may be a row of a table of
    several runs, where a field another run sets is missing (None or NaN) in this one."""
    if isinstance(config.get("model.hf"), str):
        return ()
    found = []
    for mixer in dict.fromkeys(json.loads(config["model.mixer"])):
        if not is_import_path(mixer):
            prefix = f"model.options.{mixer}."
            given = {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix) and not missing(v)}
            found += MIXERS[mixer].options.ablations(given)
    return tuple(dict.fromkeys(found))


def comparison_group(config: Mapping) -> str:
    """A digest of the flattened config without its learning rate and seed."""
    rest = {k: v for k, v in config.items() if k not in (LR, SEED)}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:16]


def derive(config: Mapping) -> Identity:
    """The architecture of a run with flattened config `config` (`common.flatten` of its config data, or a row
    of a `sweeps.table.collect` table); its group is None, a table's groups are derived together (`best_lr`)."""
    name, conv = arch_parts(config)
    layers, positions = arch_variant(config)
    ablations = arch_ablations(config)
    return Identity(arch_label(name, conv, layers, positions, ablations), name, conv, layers, positions, None, ablations)


def record(run_dir: Path, config: TrainConfig, root: Path) -> None:
    """Writes RUN_DIR/run.json, the run's identity (`derive` of its resolved config), where it is not there yet;
    `root` is the sweep directory the run directory is made in."""
    path = Path(run_dir) / RUN_JSON
    if not path.exists():
        safe_mkdir(Path(run_dir), root)
        flat = flatten(config.model_dump(mode="json"))
        identity = replace(derive(flat), group=comparison_group(flat))
        atomic_write_text(path, json.dumps(asdict(identity), indent=2) + "\n", Path(run_dir))


def _read(path: Path) -> Identity:
    data = read_json_object(path, {"arch": str, "arch_name": str, "group": str},
                            {"arch_conv": (int, str, type(None)), "layers": (int, type(None)), "positions": (str, type(None)),
                             "ablations": list})
    return Identity(**{k: data.get(k) for k in Identity.__dataclass_fields__ if k != "ablations"},
                    ablations=tuple(data.get("ablations", ())))


def recorded(run_dir: Path) -> Identity | None:
    """The identity its sweep recorded in RUN_DIR/run.json; None for a run made without one."""
    path = Path(run_dir) / RUN_JSON
    return read_once(path, _read) if path.exists() else None
