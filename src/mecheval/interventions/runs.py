"""A run directory's readouts, written beside it: `intervene_run(run_dir, spec)` locks the run, checks that no
readout of another kind is replaced, computes the readouts (`readout.compute_readout`: the tables and the verdict
as values) and writes them with their figures (`write_readout`):

    RUN_DIR/interventions.parquet        every (corrupt role, layer, site, position) row
    RUN_DIR/interventions/{role}_{site}.png   layer × position heatmaps
    RUN_DIR/interventions/{role}_profile.png  attribution per role at every block boundary
    RUN_DIR/carriers.parquet             the full-window readout at the verdict's read point (`carriers.py`)
    RUN_DIR/accuracy.parquet             accuracy (Wilson 95% interval) per artefact subset and key distance
    RUN_DIR/conv_window.parquet, conv_ablation.parquet, interventions/conv_window.png   (--analysis conv-window)
    RUN_DIR/two_token.parquet, rotary.parquet   (--analysis two-token, rotary: a mixer's own term zeroed per layer)
    RUN_DIR/state_curve.parquet, interventions/state_curve.png   (--analysis state, models with a state)
    RUN_DIR/pointer.parquet              the pointer control at the verdict's read point (`pointer.py`)
    RUN_DIR/verdict.json                 the mechanism verdict, its detail, the accuracy it rests on, and which
                                         prompts were read: those not seen in training (`training.prompts`),
                                         with the share seen and the accuracy on all prompts beside them
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import pandas as pd

from mecheval.common import (NUMBER, ConfigError, atomic_write_bytes, atomic_write_text, read_json_object, read_table,
                             safe_mkdir, safe_unlink)
from mecheval.errors import MechevalError
from mecheval.interventions.accuracy import EXAMPLES, accuracy_fields, correct_answers, example_ids, example_table
from mecheval.interventions.artefact import subsets
from mecheval.interventions.pointer import POINTER
from mecheval.interventions.plots import conv_window_heatmap, heatmap, layer_profile, state_curve_plot
from mecheval.interventions.readout import (PROMPT_FIELDS, READ_SETTINGS, Readout, compute_readout, pointer_at,
                                            outside_of, print_note, prompts_read, read_settings, read_verdict,
                                            term_tables)
from mecheval.interventions.spec import VERDICT_ROLE, ReadoutSpec
from mecheval.interventions.terms import TERMS
from mecheval.interventions.verdict import JOINT, LABELS, Accuracy, Verdict
from mecheval.models.sites import matches
from mecheval.tasks import chance_accuracy
from mecheval.training.prompts import run_training_ids, unseen_sample
from mecheval.training.lock import DirLock, run_locked
from mecheval.training.run_dir import RunDir

RUN_MARKERS = ("config.yaml", "model.safetensors")  # files every finished run directory holds


def find_runs(path: Path) -> list[Path]:
    """`path` itself if it is a finished run directory, else every one below it (sorted)."""
    if all((path / f).exists() for f in RUN_MARKERS):
        return [path]
    runs = sorted(p.parent for p in path.rglob(RUN_MARKERS[1]) if (p.parent / RUN_MARKERS[0]).exists())
    if not runs:
        raise FileNotFoundError(f"{path}: neither a finished run directory nor a directory containing any")
    return runs


KEPT = {"conv-window": ("conv_window.parquet", "conv_ablation.parquet", "interventions/conv_window.png"),
        "state": ("state_curve.parquet", "interventions/state_curve.png"),
        **{name: (term.file,) for name, term in TERMS.items()}}  # an analysis' files, kept until recomputed


@run_locked
def write_examples(run_dir: Path, n: int, seed: int = 0, split: str = "test") -> pd.DataFrame | None:
    """RUN_DIR/examples.parquet (`example_table`) on the batch `intervene_run` reads with the same n, seed and
    split (the prompts unseen in training), for a run intervened on before the table existed: one forward pass, nothing patched. None for
    multi-answer tasks."""
    from mecheval import load_run

    lm, task, cfg = load_run(run_dir)
    batch, _ = unseen_sample(task, n, seed, split, _trained_on(run_dir, cfg))
    if batch.answer.dim() != 1:
        return None
    table = example_table(correct_answers(lm, batch), batch, subsets(lm, batch))
    write_table(Path(run_dir), EXAMPLES, table)
    return table


# verdict.json's `rules`: 5 = a model whose accuracy on the examples read is not above chance is `not learned`
# whatever its effect; 4 = read on prompts unseen in training, a direct retrieval at the query checked by the
# pointer control; 3 = labels decided by intervals, direct retrieval by the full-window readout's joint patch
# where read (2: by the joint key&query patch; 1: points)
VERDICT_RULES = 5
VERDICT = "verdict.json"
SPLITS = "splits"  # RUN/splits/<split>/: the readouts of a further split (e.g. ATR's held-out pairs), read as the test split is
VERDICT_FIELDS = {"verdict": str, "detail": str, "effect": NUMBER, "layer": int, "site": str, "n": int,
                  "attrib@key": NUMBER, "attrib@value": NUMBER, "attrib@query": NUMBER}  # what readers rely on
NUMERIC_FIELDS = ("effect", "attrib@", "window@", "acc_", "n_", "seen_share")  # verdict.json fields read as numbers


def write_table(run_dir: Path, name: str, df: pd.DataFrame) -> None:
    """RUN_DIR/name as Parquet, written whole (`common.atomic_write_bytes`)."""
    atomic_write_bytes(run_dir / name, df.to_parquet(index=False), run_dir)


def read_verdict_file(run_dir: Path) -> dict:
    """RUN_DIR/verdict.json, checked: an object with VERDICT_FIELDS of their types and a known label;
    ConfigError naming the file otherwise (a 0-byte file left by a full disk, `[]`, wrong types)."""
    path = Path(run_dir) / VERDICT
    row = read_json_object(path, VERDICT_FIELDS)
    if row["verdict"] not in LABELS:
        raise ConfigError(f"{path}: verdict {row['verdict']!r} is not one of {list(LABELS)}")
    for key, value in row.items():  # the intervals, accuracies and counts beside them: numbers or null
        number = isinstance(value, NUMBER) and not isinstance(value, bool)
        if key.startswith(NUMERIC_FIELDS) and value is not None and not number:
            raise ConfigError(f"{path}: field {key!r} is {value!r}, expected int or float")
    return row


def split_dir(run_dir: Path, split: str) -> Path:
    """Where `intervene_run(run_dir, ReadoutSpec(split=split), out=...)` writes a run's readouts on a split other than test."""
    return Path(run_dir) / SPLITS / split


def has_valid_verdict(run_dir: Path) -> bool:
    """verdict.json exists and reads (`read_verdict_file`); a missing, empty or invalid one is recomputed."""
    try:
        read_verdict_file(run_dir)
    except (OSError, ConfigError):
        return False
    return True


def _trained_on(run_dir: Path, cfg):
    """The prompts the run in `run_dir` trained on (`training.prompts.run_training_ids`); None for a model loaded
    without a training config."""
    return None if cfg is None else run_training_ids(run_dir, cfg)


def _optional(path: Path) -> pd.DataFrame | None:
    return pd.read_parquet(path) if path.exists() else None


def write_verdict(run_dir: Path, verdict: Verdict, min_effect: float, source: str = "patched",
                  prompts: dict | None = None) -> None:
    """RUN_DIR/verdict.json: the verdict, the accuracy it rests on, the rules and filter that decided it, its
    source: "patched" (this call's tables) or "relabelled" (decided anew from earlier tables, whose artefact
    control and cells are those of the code that patched them), and `prompts` (`unseen_sample`'s provenance
    and the accuracy on all prompts; a relabelled verdict keeps the earlier file's)."""
    row = verdict.as_row() | accuracy_fields(run_dir / "accuracy.parquet", verdict.subset)
    if prompts is None:
        try:
            earlier = json.loads((run_dir / VERDICT).read_text())
        except (OSError, ValueError):
            earlier = {}
        prompts = {k: v for k, v in earlier.items() if k in PROMPT_FIELDS}
    row |= prompts | {"rules": VERDICT_RULES, "min_effect": min_effect, "source": source}
    atomic_write_text(run_dir / VERDICT, json.dumps(row, indent=2) + "\n", run_dir)


@run_locked
def relabel_run(run_dir: Path, min_effect: float, chance: float | None = None) -> Verdict | None:
    """verdict.json decided anew by the current rules from the run's committed tables (interventions.parquet,
    conv_window.parquet, carriers.parquet, the pointer control and accuracy.parquet where present): no model is
    built, nothing is patched. A table without the full-window readout is read with the joint key&query rows, and
    without those with the published sum and its intervals' sum. chance: the task's chance accuracy, which the
    `learned` test reads (None: that of the task in run_dir's config.yaml). None where nothing can be read."""
    run_dir = Path(run_dir)
    return _relabel(run_dir, min_effect, task_chance(run_dir) if chance is None else chance)


def relabel_runs(path: Path) -> list[tuple[Path, str | None, str]]:
    """Every readout under `path` (a run directory, or a folder of them: `find_runs`; each run's further splits,
    RUN/splits/<split>/, too) decided anew by the current rules (`relabel_run`), each with the `min_effect` its
    verdict.json was decided with -> (readout dir, its earlier label or None, its label now); a readout with
    nothing to read is left out."""
    out = []
    for run_dir in find_runs(Path(path)):
        chance = task_chance(run_dir)
        for readouts in [run_dir, *sorted((run_dir / SPLITS).glob("*/"))]:
            if not (readouts / "interventions.parquet").exists():
                continue
            try:
                earlier = read_verdict_file(readouts)
            except (OSError, ConfigError):
                earlier = {}
            verdict = relabel_run(readouts, earlier.get("min_effect", ReadoutSpec().min_effect), chance)
            if verdict is not None:
                out.append((readouts, earlier.get("verdict"), verdict.label))
    return out


def task_chance(run_dir: Path) -> float:
    """The chance accuracy of the task a run trained on (its config.yaml, read importing no plug-in: NaN for a
    plug-in task)."""
    return chance_accuracy(RunDir(run_dir).read_config_data()["task"])


def _relabel(run_dir: Path, min_effect: float, chance: float, prompts: dict | None = None) -> Verdict | None:
    """`relabel_run` without the lock; `prompts` as `write_verdict`'s."""
    df = pd.read_parquet(run_dir / "interventions.parquet")
    if VERDICT_ROLE not in set(df["corrupt"]):
        return None
    table = _optional(run_dir / "accuracy.parquet")
    verdict = read_verdict(df, _optional(run_dir / "conv_window.parquet"), VERDICT_ROLE, min_effect,
                           _optional(run_dir / "carriers.parquet"), _optional(run_dir / POINTER),
                           None if table is None else Accuracy(table, chance))
    if verdict is not None:
        write_verdict(run_dir, verdict, min_effect, source="relabelled", prompts=prompts)
    return verdict


@run_locked
def recheck_run(readout_dir: Path, run_dir: Path, spec: ReadoutSpec) -> bool:
    """Brings the verdict in `readout_dir` (the run directory, or its split's) to the current rules with a few
    forward passes where that suffices: where its tables were read on the examples `prompts_read` draws now (the
    spec's n, seed and split
    ; none of their prompts seen in training), the pointer control is run at the verdict's read point and the
    verdict decided anew from the tables with it (`relabel_run`). False, changing nothing, where the tables
    must be patched again (`intervene_run`): their examples include prompts seen in training, or are unknown."""
    from mecheval import load_run

    readout_dir = Path(readout_dir)
    lm, task, cfg = load_run(run_dir)
    batch, prompts = prompts_read(lm, task, spec.n, spec.seed, spec.split, _trained_on(run_dir, cfg))
    if batch.answer.dim() != 1 or not _read_on(readout_dir, batch):
        return False
    old = read_verdict_file(readout_dir)
    pointer = None if old["verdict"] == "not learned" else pointer_at(lm, task, batch, subsets(lm, batch), old["site"],
                                                                      old["layer"], old["subset"], spec.seed)
    if pointer is not None:
        write_table(readout_dir, POINTER, pointer)
    _relabel(readout_dir, spec.min_effect, task.chance_accuracy, prompts)
    return True


@run_locked
def reread_terms(run_dir: Path, spec: ReadoutSpec) -> list[str]:
    """Computes a run's term tables again (`spec.analyses` among `terms.TERMS`) on the examples its readout read,
    its other readouts left as they are: for a term table whose code changed since (no verdict reads one) ->
    the files written. ReadoutKindError (a ValueError) where the run's readout read other examples than `spec`
    draws (its examples.parquet: another n, seed or split, or prompts seen in training)."""
    from mecheval import load_run

    lm, task, cfg = load_run(run_dir)
    batch, _ = unseen_sample(task, spec.n, spec.seed, spec.split, _trained_on(run_dir, cfg))
    if not _read_on(run_dir, batch):
        raise ReadoutKindError(f"{run_dir}: its readout read other examples than n={spec.n}, seed={spec.seed}, "
                               f"split={spec.split!r} draw: read it again (`intervene_run`)")
    tables = term_tables(lm, outside_of(batch, subsets(lm, batch)), spec.analyses)
    for name, table in tables.items():
        write_table(Path(run_dir), TERMS[name].file, table)
    return [TERMS[name].file for name in tables]


def _read_on(readout_dir: Path, batch) -> bool:
    """The readout in `readout_dir` was read on exactly `batch`'s examples (its examples.parquet, in order)."""
    examples = _optional(Path(readout_dir) / EXAMPLES)
    return examples is not None and examples["id"].tolist() == example_ids(batch)


def verdict_is_current(run_dir: Path) -> bool:
    """verdict.json exists, was decided by the current rules and says which prompts it read."""
    if not has_valid_verdict(run_dir):
        return False
    row = read_verdict_file(run_dir)
    return row.get("rules") == VERDICT_RULES and "prompts" in row


class ReadoutKindError(MechevalError, ValueError):
    """A run's interventions table holds readouts of another kind than a call would write in its place."""


def lost_readouts(old: pd.DataFrame, spec: ReadoutSpec) -> list[str]:
    """What a new table read by `spec` (its corrupted roles, direction, method, site patterns and positions) would
    not read that the `old` table reads, in words; [] where it reads it all."""
    def column(name: str, default: str = "") -> set[str]:
        return set(old[name].astype(str)) if name in old else {default}

    lost = {"corrupt": column("corrupt") - set(spec.corrupt)}
    for name, value, default in (("direction", spec.direction, "sufficiency"), ("method", spec.method, "exact")):
        lost[name] = column(name, default) - {value}
    if "*" not in spec.sites:
        patterns = [*spec.sites, "resid_pre", "resid_post"]  # the layer profile is always read (`intervene_run`)
        names = {f"layers.{layer}.{site}" for layer, site in zip(old["layer"], old["site"])}
        lost["sites"] = {name for name in names if not any(matches([name], p) for p in patterns)}
    new = None if spec.positions is None else {str(p) for p in spec.positions} | {JOINT}
    lost["positions"] = {p for p in column("position") if not (p in new if new else p.isidentifier() or p == JOINT)}
    return [f"{name} {', '.join(sorted(values))}" for name, values in lost.items() if values]


def other_settings(out_dir: Path, settings: dict) -> list[str]:
    """The READ_SETTINGS OUT_DIR/verdict.json was read with that differ from `settings`, in words, by argument
    ("`n` 512, not 1024"); [] where none differ, or where the readout records none (a verdict before they were kept)."""
    try:
        row = read_verdict_file(out_dir)
    except (OSError, ConfigError):
        return []
    return [f"`{arg}` {row[k]}, not {settings[k]}" for k, arg in READ_SETTINGS.items()
            if k in row and k in settings and row[k] != settings[k]]


def check_replace(out_dir: Path, spec: ReadoutSpec) -> None:
    """ReadoutKindError where OUT_DIR/interventions.parquet reads something a table read by `spec` would not
    (`lost_readouts`), or its verdict was read on other examples (`other_settings`: the spec's n, seed, split):
    readouts are extended or redone, never silently replaced by another kind or reading."""
    path = Path(out_dir) / "interventions.parquet"
    if not path.exists():
        return
    lost = lost_readouts(pd.read_parquet(path), spec)
    other = other_settings(out_dir, read_settings(spec.n, spec.seed, spec.split))
    what = ([f"this call would not write ({'; '.join(lost)})"] if lost else []) + \
        ([f"read with other settings ({'; '.join(other)})"] if other else [])
    if what:
        raise ReadoutKindError(f"{Path(out_dir)} holds readouts {' and '.join(what)}: write them elsewhere "
                               f"(`out=DIR`), or pass `replace=True` to read them again there")


def intervene_run(
    run_dir: Path, spec: ReadoutSpec = ReadoutSpec(), *, out: Path | None = None, replace: bool = False,
    on_note: Callable[[str], None] = print_note,
) -> tuple[pd.DataFrame, Verdict | None]:
    """Reads one run as `spec` asks (`ReadoutSpec`: the CLI's defaults) and writes its readouts (module docstring)
    -> (the interventions table, the verdict or None).

    Every table is split by the receptive-field artefact (`artefact.subsets`: column `subset`, the verdict reads
    `outside`); the layer profile is always included; the verdict is read only under key corruption
    (sufficiency): its rules are for it, other corrupted roles get attributions and no label. An analysis that
    does not apply says so in one line to `on_note` (`readout.inapplicable`; default: stderr). Also written:
    accuracy.parquet (accuracy with Wilson intervals per subset and key distance), for single-answer tasks
    examples.parquet (`example_table`: the same per example, for like-for-like comparisons) and, read in the
    sufficiency direction, carriers.parquet (the full-window readout at the verdict's read point).
    out: the directory written (default: the run directory), held by its lock meanwhile; a run read into another
    directory is held by a reader's lock (readers of one run at once, none beside its writer). An analysis not
    asked for keeps its files (a conv-window table is read by the verdict); readouts of another kind, or read on
    other examples (n, seed, split: `check_replace`), are not written over unless `replace`.
    """
    from mecheval import load_run

    out_dir = Path(out) if out is not None else Path(run_dir)
    elsewhere = out_dir.resolve() != Path(run_dir).resolve()
    with DirLock(out_dir, "run directory"), DirLock(run_dir, "run directory", shared=True) if elsewhere else nullcontext():
        if not replace:
            check_replace(out_dir, spec)
        lm, task, cfg = load_run(run_dir)
        return intervene_model(out_dir, lm, task, spec, train_ids=_trained_on(run_dir, cfg), on_note=on_note)


def intervene_model(
    out_dir: Path, lm, task, spec: ReadoutSpec = ReadoutSpec(), *, train_ids=None,
    on_note: Callable[[str], None] = print_note,
) -> tuple[pd.DataFrame, Verdict | None]:
    """`intervene_run` on a model and task already built (an LM, or `mecheval.hf.wrap`'s): the readouts computed
    (`readout.compute_readout`), then written into `out_dir` (`write_readout`). train_ids: the prompts the model
    trained on (`training.prompts`); the readouts then read only prompts outside them (None: every prompt)."""
    out_dir = Path(out_dir)
    earlier = _optional(out_dir / "conv_window.parquet")  # read by the verdict unless recomputed
    readout = compute_readout(lm, task, spec, train_ids, earlier, on_note=lambda text: on_note(f"{out_dir.name}: {text}"))
    write_readout(out_dir, readout)
    return readout.interventions, readout.verdict


def write_readout(out_dir: Path, readout: Readout) -> None:
    """A readout's tables, figures and verdict into `out_dir` (module docstring): the verdict removed first and
    written last; an analysis not asked for keeps its earlier files (KEPT), the rest of an earlier call's figures,
    full-window table and pointer control are replaced or removed."""
    spec = readout.spec
    safe_mkdir(out_dir, out_dir.parent)
    safe_unlink(out_dir / VERDICT, out_dir)  # until this call's is written, the run has none
    write_table(out_dir, "interventions.parquet", readout.interventions)
    write_table(out_dir, "accuracy.parquet", readout.accuracy)
    if readout.examples is not None:
        write_table(out_dir, EXAMPLES, readout.examples)
    kept = {f for name, files in KEPT.items() if name not in spec.analyses for f in files}
    safe_mkdir(out_dir / "interventions", out_dir)
    for old in (out_dir / "interventions").glob("*.png"):  # a previous call's heatmaps and profiles
        if str(old.relative_to(out_dir)) not in kept:
            safe_unlink(old, out_dir)
    if readout.conv_window is not None:
        write_table(out_dir, "conv_window.parquet", readout.conv_window)
        write_table(out_dir, "conv_ablation.parquet", readout.conv_ablation)
        if not readout.conv_window.empty:
            conv_window_heatmap(readout.conv_window, out_dir / "interventions" / "conv_window.png",
                                title=textwrap.fill(out_dir.name, 48))
    for name, table in readout.terms.items():
        write_table(out_dir, TERMS[name].file, table)
    write_figures(out_dir, readout.interventions)
    for name, table in (("carriers.parquet", readout.carriers), (POINTER, readout.pointer)):
        if table is not None:
            write_table(out_dir, name, table)
        else:  # a previous call's, read with the verdict this call does not write
            safe_unlink(out_dir / name, out_dir)
    if readout.state_curve is not None:
        write_state_readout(out_dir, readout.state_curve, spec.analysed_role, readout.state_n)
    redraw_kept_figures(out_dir, kept)
    if readout.verdict is not None:
        write_verdict(out_dir, readout.verdict, spec.min_effect, prompts=readout.prompts)


def write_figures(out_dir: Path, df: pd.DataFrame) -> None:
    """OUT_DIR/interventions/{role}_{site}.png (layer × position heatmaps) and {role}_profile.png (attribution per
    role at every block boundary) of an interventions table, on the examples outside the conv reach (all where
    none is)."""
    shown_subset = "outside" if (df["subset"] == "outside").any() else "all"
    shown = df[df["subset"] == shown_subset]
    for (r, site), part in shown.groupby(["corrupt", "site"], sort=False):
        title = f"{textwrap.fill(out_dir.name, 36)}\ncorrupt {r}, {site}, {shown_subset} (n = {int(part['n'].iloc[0])})"
        heatmap(part, site, out_dir / "interventions" / f"{r}_{site}.png", title=title)
    for r, part in shown.groupby("corrupt", sort=False):
        title = f"{textwrap.fill(out_dir.name, 48)}\ncorrupt {r}, {shown_subset} (n = {int(part['n'].iloc[0])})"
        layer_profile(part, out_dir / "interventions" / f"{r}_profile.png", title=title)


def redraw_kept_figures(out_dir: Path, kept: set[str]) -> None:
    """The figure of each kept analysis drawn again from its kept table where the figure is missing (a committed
    run keeps its tables, not its per-run PNGs: a repatch that keeps the state readout must not lose its figure)."""
    figures = {  # figure -> (its table, the columns drawing reads, how it is drawn)
        "interventions/state_curve.png": ("state_curve.parquet", ("corrupt", "n"), lambda t, path: state_curve_plot(
            t, path, title=_state_title(out_dir, t["corrupt"].iloc[0], int(t["n"].max())))),
        "interventions/conv_window.png": ("conv_window.parquet", (), lambda t, path: conv_window_heatmap(
            t, path, title=textwrap.fill(out_dir.name, 48))),
    }
    for figure, (name, columns, draw) in figures.items():
        if figure in kept and not (out_dir / figure).exists() and (out_dir / name).exists():
            table = read_table(out_dir / name, columns)
            if not table.empty:
                draw(table, out_dir / figure)


def _state_title(out_dir: Path, corrupt: str, n: int) -> str:
    """The state readout figure's title: the run, the corrupted role and the examples read."""
    return f"{textwrap.fill(out_dir.name, 48)}\ncorrupt {corrupt}, n = {n}"


def write_state_readout(out_dir: Path, curve: pd.DataFrame, corrupt: str, n: int) -> None:
    """OUT_DIR/state_curve.parquet and interventions/state_curve.png: the state readout (`state_readout.state_curve`)
    under `corrupt` corruption of n examples."""
    write_table(out_dir, "state_curve.parquet", curve)
    state_curve_plot(curve, out_dir / "interventions" / "state_curve.png", title=_state_title(out_dir, corrupt, n))
