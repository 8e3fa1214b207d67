"""A study's results as one table: a row per run with its architecture label, accuracy and verdict."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pandas as pd

from mecheval.interventions.runs import SPLITS, VERDICT, read_verdict_file, split_dir
from mecheval.models.mixers import mixer_label
from mecheval.plugins import is_import_path
from mecheval.models.presets import PUBLISHED_LAYERS, arch_label
from mecheval.sweeps.table import best_lr, collect, runs_dir
from mecheval.training.run_dir import RunDir

ACC = "summary.final.test.acc"
HELDOUT_ACC = "summary.final.heldout.acc"  # ATR's generalisation split, where the study evaluates it
HELDOUT_VALUE = "heldout.attrib@value"  # attrib@value read on that split (`study.presets.Study.splits`)
HELDOUT_READ_ACC = "heldout.acc_all"  # accuracy on that readout's examples, with its Wilson interval
VERDICT_FIELDS = ("verdict", "detail", "effect", "attrib@key", "attrib@value", "attrib@query")  # always present


@functools.lru_cache(maxsize=None)
def _default_convs(preset: str, mixers: str, n_layers: int) -> tuple:
    from mecheval.models import ModelConfig

    data = {"preset": preset} if preset else {"mixer": json.loads(mixers)}
    return tuple(ModelConfig(vocab_size=1, n_layers=n_layers, **data).d_conv)


def _chance(task: dict) -> float:
    """The task's chance accuracy; NaN for a plug-in task (reading results imports no plug-in)."""
    from mecheval.tasks import make_task

    if is_import_path(task["name"]):
        return float("nan")
    return make_task(task["name"], **task.get("params", {})).chance_accuracy


def _label(mixer: str) -> str:
    """A mixer as reports name it: its zoo name, or a plug-in's class name in lower case (its code is not
    imported to read results)."""
    return mixer.rpartition(":")[2].rpartition(".")[2].lower() if is_import_path(mixer) else mixer_label(mixer)


def arch_parts(row: pd.Series) -> tuple[str, int | str | None]:
    """A run's architecture as data: (name, conv). The name is the preset, or the mixers joined by `+`
    (a plug-in by its class name); conv is the first layer's convolution that differs from that
    architecture's published default, None where none does (always None with a plug-in mixer, whose
    default reading results does not import). `models.presets.arch_label` writes them.
    A transformers model (`model.hf`) is `hf:` and its class name, conv None."""
    hf = row.get("model.hf")
    if isinstance(hf, str):
        return f"hf:{hf.rpartition(':')[2]}", None
    preset = row.get("model.preset")
    preset = preset if isinstance(preset, str) else None
    mixers = json.loads(row["model.mixer"])
    name = preset or "+".join(dict.fromkeys(_label(m) for m in mixers))
    convs = json.loads(row["model.d_conv"])
    if any(is_import_path(m) for m in mixers):
        return name, None
    if int(row["model.n_layers"]) != PUBLISHED_LAYERS:  # a depth variant's convs are its depth's (`arch_variant`)
        return name, None
    default = _default_convs(preset or "", row["model.mixer"], PUBLISHED_LAYERS)
    changed = [c for c, d in zip(convs, default) if c != d]
    return name, changed[0] if changed else None


@functools.lru_cache(maxsize=None)
def _default_positions(preset: str) -> str:
    from mecheval.models import ModelConfig

    return ModelConfig(vocab_size=1, preset=preset).pos_emb


def arch_variant(row: pd.Series) -> tuple[int | None, str | None]:
    """(layers, positions) of a preset's run where they differ from the published design: its depth where
    not 2 layers, its position embedding ("learned" / "none") where not the preset's; None where they do
    not differ (and for runs without a preset). `models.presets.arch_label` names them."""
    preset = row.get("model.preset")
    if not isinstance(preset, str):
        return None, None
    layers = int(row["model.n_layers"])
    positions = row.get("model.pos_emb")
    return (layers if layers != PUBLISHED_LAYERS else None,
            positions if isinstance(positions, str) and positions != _default_positions(preset) else None)


def study_table(study_dir: str | Path, every_run: bool = False) -> pd.DataFrame:
    """Every run of the study: config, summary, `arch` (its label; as data: `arch_name`, `arch_conv`), `acc` (`acc_heldout` too where the held-out
    split was evaluated), `best_lr` (True for the runs the published selection keeps), `run_dir`, and
    every field of the run's verdict.json (None where interventions were not run): the verdict and its
    detail, attributions with intervals, `acc_all` / `acc_outside` with intervals and example counts; those
    of a further split's readout as `split.field` (e.g. `heldout.attrib@value`, `runs.split_dir`).
    `every_run`: also the runs in the directory that its sweep.yaml does not list (`sweeps.table.collect`)."""
    study_dir = Path(study_dir)
    df = collect(study_dir, every_run)
    # selected on the config columns alone, before derived columns (arch, acc) join them
    best = set(best_lr(df)["name"]) if (df["status"] == "done").any() else set()
    parts = [arch_parts(row) for _, row in df.iterrows()]
    df["arch_name"] = pd.Series([n for n, _ in parts], index=df.index, dtype=object)
    df["arch_conv"] = pd.Series([c for _, c in parts], index=df.index, dtype=object)  # None: the default
    df["arch"] = [arch_label(n, c, *arch_variant(row)) for (n, c), (_, row) in zip(parts, df.iterrows())]
    df["acc"] = df.get(ACC)
    if HELDOUT_ACC in df:
        df["acc_heldout"] = df[HELDOUT_ACC]
    df["best_lr"] = df["name"].isin(best)
    root = runs_dir(study_dir)
    df["chance"] = [_chance(RunDir(root / name).read_config_data()["task"]) for name in df["name"]]
    df["run_dir"] = [str(root / name) for name in df["name"]]
    dirs = [root / name for name in df["name"]]
    verdicts = _verdicts(dirs)
    fields = list(dict.fromkeys([*VERDICT_FIELDS, *(k for v in verdicts for k in v)]))
    # the verdict, its detail and intervals, and the accuracy it rests on (`intervene_run`)
    columns = {f: [v.get(f) for v in verdicts] for f in fields}
    for split in sorted({p.parent.name for d in dirs for p in (d / SPLITS).glob(f"*/{VERDICT}")}):
        verdicts = _verdicts([split_dir(d, split) for d in dirs])  # a further split's readout, as `split.field`
        columns |= {f"{split}.{f}": [v.get(f) for v in verdicts] for f in dict.fromkeys(k for v in verdicts for k in v)}
    return pd.concat([df.drop(columns=[c for c in columns if c in df]), pd.DataFrame(columns, index=df.index)],
                     axis=1)


def _verdicts(dirs: list[Path]) -> list[dict]:
    """The verdict.json of each directory, {} where it has none; one that does not read is an error naming it
    (`read_verdict_file`)."""
    return [read_verdict_file(d) if (d / VERDICT).exists() else {} for d in dirs]
