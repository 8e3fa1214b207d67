"""Interchange experiments on a trained run directory: tables, heatmaps and the verdict, written beside it.

    RUN_DIR/interventions.parquet        every (corrupt role, layer, site, position) row
    RUN_DIR/interventions/{role}_{site}.png   layer × position heatmaps
    RUN_DIR/interventions/{role}_profile.png  attribution per role at every block boundary
    RUN_DIR/carriers.parquet             the full-window readout at the verdict's read point (`carriers.py`)
    RUN_DIR/accuracy.parquet             accuracy (Wilson 95% interval) per artefact subset and key distance
    RUN_DIR/conv_window.parquet, conv_ablation.parquet, interventions/conv_window.png   (--analysis conv-window)
    RUN_DIR/two_token.parquet   (--analysis two-token: Mamba-3's previous-token term zeroed per layer)
    RUN_DIR/state_curve.parquet, interventions/state_curve.png   (--analysis state, models with a state)
    RUN_DIR/pointer.parquet              the pointer control at the verdict's read point (`pointer.py`)
    RUN_DIR/verdict.json                 the mechanism verdict, its detail, the accuracy it rests on, and which
                                         prompts were read: those not seen in training (`training.prompts`),
                                         with the share seen and the accuracy on all prompts beside them
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from mecheval.common import (NUMBER, ConfigError, atomic_write_bytes, atomic_write_text, read_json_object, safe_mkdir,
                             safe_unlink)
from mecheval.errors import MechevalError
from mecheval.interventions.accuracy import (EXAMPLES, accuracy_fields, accuracy_table, correct_answers, example_ids,
                                             example_table)
from mecheval.interventions.artefact import distance_subsets, short_convs, subsets
from mecheval.interventions.carriers import carriers_table
from mecheval.interventions.conv_window import conv_ablation, conv_window
from mecheval.interventions.two_token import TWO_TOKEN, two_token_ablation, two_token_sites
from mecheval.interventions.metrics import accuracy_interval
from mecheval.interventions.patching import N_EXAMPLES, interchange
from mecheval.interventions.pointer import POINTER, pointer_control
from mecheval.interventions.plots import conv_window_heatmap, heatmap, layer_profile, state_curve_plot
from mecheval.interventions.state_readout import state_curve, state_sites
from mecheval.interventions.positions import Position
from mecheval.interventions.verdict import (JOINT, LABELS, ROLES, NothingToRead, Verdict, mechanism, read_point,
                                            shows_attributions)
from mecheval.models.sites import matches
from mecheval.training.prompts import run_training_ids, unseen_sample
from mecheval.training.lock import run_locked

RUN_MARKERS = ("config.yaml", "model.safetensors")  # files every finished run directory holds


def find_runs(path: Path) -> list[Path]:
    """`path` itself if it is a finished run directory, else every one below it (sorted)."""
    if all((path / f).exists() for f in RUN_MARKERS):
        return [path]
    runs = sorted(p.parent for p in path.rglob(RUN_MARKERS[1]) if (p.parent / RUN_MARKERS[0]).exists())
    if not runs:
        raise FileNotFoundError(f"{path}: neither a finished run directory nor a directory containing any")
    return runs


def present_sites(names: list[str], patterns: list[str]) -> list[str]:
    """The patterns that match at least one site name (a bare kind means `layers.*.kind`)."""
    return [p for p in patterns if matches(names, p)]


ANALYSES = ("conv-window", "state", "two-token")  # optional analyses of `intervene_run` (`--analysis`)
VERDICT_ROLE = "key"  # the verdict's rules are for key corruption; other roles get attributions, no label
KEPT = {"conv-window": ("conv_window.parquet", "conv_ablation.parquet", "interventions/conv_window.png"),
        "state": ("state_curve.parquet", "interventions/state_curve.png"),
        "two-token": (TWO_TOKEN,)}  # an analysis' files, kept until recomputed
STATE_EXAMPLES = 512  # the state readout reads at most the first 512 examples (its cost is O(T · state) per example and point)
NEEDS = {  # analysis -> (the part of the model it reads, found; the part named where the model lacks it)
    "conv-window": (short_convs, "short convolution (the analysis reads where one binds key and value)"),
    "state": (state_sites, "recurrent state (the analysis reads the answer each layer's state carries)"),
    "two-token": (two_token_sites, "two-token term (Mamba-3's trapezoidal update: the analysis zeroes it per layer)"),
}


def print_note(text: str) -> None:
    """A note beside the progress bars (stderr)."""
    tqdm.write(text, file=sys.stderr)


def inapplicable(lm, analyses: list[str]) -> list[str]:
    """One line per asked analysis that does not apply to `lm`, saying why (it lacks the part the analysis reads)."""
    return [f"the {a} analysis does not apply: the model has no {NEEDS[a][1]}" for a in analyses if not NEEDS[a][0](lm)]


def write_state_readout(run_dir: Path, lm, task, batch, corrupt: str, seed: int = 0) -> pd.DataFrame | None:
    """The state readout (`state_readout.state_curve`) of a model with state sites on `batch` (the examples
    outside the conv reach; the first STATE_EXAMPLES): RUN_DIR/state_curve.parquet and interventions/state_curve.png; None without."""
    if not state_sites(lm):
        return None
    batch = batch.select(slice(0, STATE_EXAMPLES))
    curve = state_curve(lm, task, batch, corrupt=corrupt, seed=seed)
    write_table(run_dir, "state_curve.parquet", curve)
    state_curve_plot(curve, run_dir / "interventions" / "state_curve.png",
                     title=f"{textwrap.fill(run_dir.name, 48)}\ncorrupt {corrupt}, n = {len(batch)}")
    return curve


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


# verdict.json's `rules`: 4 = read on prompts unseen in training, a direct retrieval at the query checked by the
# pointer control; 3 = labels decided by intervals, direct retrieval by the full-window readout's joint patch
# where read (2: by the joint key&query patch; 1: points)
VERDICT_RULES = 4
VERDICT = "verdict.json"
SPLITS = "splits"  # RUN/splits/<split>/: the readouts of a further split (e.g. ATR's held-out pairs), read as the test split is
NUMBER = (int, float)
READ_SETTINGS = {"n_examples": "n", "read_seed": "seed", "split": "split"}  # verdict.json: the examples a readout
# was asked for, each field by the argument that set it (`read_seed`, not `seed`: a study's table joins verdict fields
# to the run's config, whose `seed` is the training seed)
PROMPT_FIELDS = (*READ_SETTINGS, "prompts", "seen_share", "n_drawn", "acc_all_prompts", "acc_all_prompts_lo",
                 "acc_all_prompts_hi", "n_all_prompts")  # verdict.json: which prompts were read (`prompts_read`)
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
    """Where `intervene_run(..., split=split, out=...)` writes a run's readouts on a split other than test."""
    return Path(run_dir) / SPLITS / split


def has_valid_verdict(run_dir: Path) -> bool:
    """verdict.json exists and reads (`read_verdict_file`); a missing, empty or invalid one is recomputed."""
    try:
        read_verdict_file(run_dir)
    except (OSError, ConfigError):
        return False
    return True


def read_verdict(
    df: pd.DataFrame, window: pd.DataFrame | None, corrupt: str, min_effect: float, carriers: pd.DataFrame | None = None,
    pointer: pd.DataFrame | None = None,
) -> Verdict | None:
    """The verdict of an interventions table (sufficiency rows with `resid_pre` at the key, value and query), None
    where it has nothing to read."""
    at_read = df[(df["site"] == "resid_pre") & (df["corrupt"] == corrupt)]
    if not set(ROLES) <= set(at_read["position"].astype(str)):  # e.g. only --positions key+1 was patched
        return None
    try:
        return mechanism(df, corrupt=corrupt, min_effect=min_effect, conv_window=window, carriers=carriers, pointer=pointer)
    except NothingToRead:  # a 1-layer model without a conv: nothing to read but the embedding
        return None


def read_with_controls(
    lm, task, batch, df: pd.DataFrame, masks: dict, corrupt: str, min_effect: float, window: pd.DataFrame | None,
    seed: int = 0,
) -> tuple[Verdict | None, pd.DataFrame | None, pd.DataFrame | None]:
    """(the verdict, the full-window table, the pointer control): `read_verdict`, then at its read point the
    full-window readout (`carriers.py`; also by the queried key's distance from the answer, subsets `distance
    d`: where the artefact control's trivial readouts are) and, for a model that learned, the pointer control
    (`pointer.py`, on the verdict's subset; tasks with `Task.move`), and the verdict decided again with both
    (single-answer batches; else without them)."""
    verdict = read_verdict(df, window, corrupt, min_effect)
    if verdict is None or batch.answer.dim() != 1:
        return verdict, None, None
    carriers = carriers_table(lm, task, batch, corrupt, verdict.site, verdict.layer, seed=seed,
                              subsets=masks | distance_subsets(batch))
    pointer = None if verdict.label == "not learned" else _pointer(lm, task, batch, masks, verdict.site, verdict.layer,
                                                                    verdict.subset, seed)
    return read_verdict(df, window, corrupt, min_effect, carriers, pointer), carriers, pointer


def _pointer(lm, task, batch, masks: dict, site: str, layer: int, subset: str, seed: int) -> pd.DataFrame | None:
    """The pointer control (`pointer.pointer_control`) at the read point on the verdict's subset; None where the
    task defines no move (`Task.move`)."""
    try:
        return pointer_control(lm, task, batch, site, layer, seed=seed, mask=masks.get(subset))
    except NotImplementedError:
        return None


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
def relabel_run(run_dir: Path, min_effect: float) -> Verdict | None:
    """verdict.json decided anew by the current rules from the run's committed tables (interventions.parquet,
    conv_window.parquet and carriers.parquet where present): no model is built, nothing is patched. A
    table without the full-window readout is read with the joint key&query rows, and without those with the
    published sum and its intervals' sum. None where nothing can be read."""
    return _relabel(Path(run_dir), min_effect)


def _relabel(run_dir: Path, min_effect: float, prompts: dict | None = None) -> Verdict | None:
    """`relabel_run` without the lock; `prompts` as `write_verdict`'s."""
    df = pd.read_parquet(run_dir / "interventions.parquet")
    if VERDICT_ROLE not in set(df["corrupt"]):
        return None
    verdict = read_verdict(df, _optional(run_dir / "conv_window.parquet"), VERDICT_ROLE, min_effect,
                           _optional(run_dir / "carriers.parquet"), _optional(run_dir / POINTER))
    if verdict is not None:
        write_verdict(run_dir, verdict, min_effect, source="relabelled", prompts=prompts)
    return verdict


@run_locked
def recheck_run(readout_dir: Path, run_dir: Path, n: int, min_effect: float, seed: int = 0, split: str = "test") -> bool:
    """Brings the verdict in `readout_dir` (the run directory, or its split's) to the current rules with a few
    forward passes where that suffices: where its tables were read on the examples `prompts_read` draws now
    (none of their prompts seen in training), the pointer control is run at the verdict's read point and the
    verdict decided anew from the tables with it (`relabel_run`). False, changing nothing, where the tables
    must be patched again (`intervene_run`): their examples include prompts seen in training, or are unknown."""
    from mecheval import load_run

    readout_dir = Path(readout_dir)
    lm, task, cfg = load_run(run_dir)
    batch, prompts = prompts_read(lm, task, n, seed, split, _trained_on(run_dir, cfg))
    examples = _optional(readout_dir / EXAMPLES)
    if examples is None or batch.answer.dim() != 1 or examples["id"].tolist() != example_ids(batch):
        return False
    old = read_verdict_file(readout_dir)
    pointer = None if old["verdict"] == "not learned" else _pointer(lm, task, batch, subsets(lm, batch), old["site"],
                                                                     old["layer"], old["subset"], seed)
    if pointer is not None:
        write_table(readout_dir, POINTER, pointer)
    _relabel(readout_dir, min_effect, prompts)
    return True


def verdict_is_current(run_dir: Path) -> bool:
    """verdict.json exists, was decided by the current rules and says which prompts it read."""
    if not has_valid_verdict(run_dir):
        return False
    row = read_verdict_file(run_dir)
    return row.get("rules") == VERDICT_RULES and "prompts" in row


class ReadoutKindError(MechevalError, ValueError):
    """A run's interventions table holds readouts of another kind than a call would write in its place."""


def lost_readouts(old: pd.DataFrame, corrupt: list[str], direction: str, method: str,
                  sites: list[str] | None = None, positions: list[Position] | None = None) -> list[str]:
    """What a new table (corrupted roles, direction, method, site patterns, positions; None: the defaults,
    every site and every role) would not read that the `old` table reads, in words; [] where it reads it all."""
    def column(name: str, default: str = "") -> set[str]:
        return set(old[name].astype(str)) if name in old else {default}

    lost = {"corrupt": column("corrupt") - set(corrupt)}
    for name, value, default in (("direction", direction, "sufficiency"), ("method", method, "exact")):
        lost[name] = column(name, default) - {value}
    if sites is not None and "*" not in sites:
        patterns = [*sites, "resid_pre", "resid_post"]  # the layer profile is always read (`intervene_run`)
        names = {f"layers.{layer}.{site}" for layer, site in zip(old["layer"], old["site"])}
        lost["sites"] = {name for name in names if not any(matches([name], p) for p in patterns)}
    new = None if positions is None else {str(p) for p in positions} | {JOINT}
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


def check_replace(out_dir: Path, corrupt: list[str], direction: str, method: str,
                  sites: list[str] | None = None, positions: list[Position] | None = None,
                  settings: dict | None = None) -> None:
    """ReadoutKindError where OUT_DIR/interventions.parquet reads something this call's table would not
    (`lost_readouts`), or its verdict was read on other examples (`other_settings`; `settings`: this call's
    READ_SETTINGS): readouts are extended or redone, never silently replaced by another kind or reading."""
    path = Path(out_dir) / "interventions.parquet"
    if not path.exists():
        return
    lost = lost_readouts(pd.read_parquet(path), corrupt, direction, method, sites, positions)
    other = other_settings(out_dir, settings or {})
    what = ([f"this call would not write ({'; '.join(lost)})"] if lost else []) + \
        ([f"read with other settings ({'; '.join(other)})"] if other else [])
    if what:
        raise ReadoutKindError(f"{Path(out_dir)} holds readouts {' and '.join(what)}: write them elsewhere "
                               f"(`out=DIR`), or pass `replace=True` to read them again there")


@run_locked
def intervene_run(
    run_dir: Path,
    corrupt: list[str],
    n: int = N_EXAMPLES,
    sites: list[str] = ("*",),
    positions: list[Position] | None = None,
    seed: int = 0,
    split: str = "test",
    direction: str = "sufficiency",
    min_effect: float = 0.01,
    skip_missing_sites: bool = False,
    analyses: list[str] = (),
    method: str = "exact",
    out: Path | None = None,
    replace: bool = False,
    verify: int = 0,
    on_note: Callable[[str], None] = print_note,
) -> tuple[pd.DataFrame, Verdict | None]:
    """Runs the interchange experiments of one run and writes its outputs -> (the table, the verdict or None).

    Every table is split by the receptive-field artefact (`artefact.subsets`: column `subset`, the
    verdict reads `outside`). The layer profile (`resid_pre` of every layer and `resid_post` of the
    last) is always included. The verdict is read only under key corruption (sufficiency): its rules are
    for it; other corrupted roles get attributions and no label. `min_effect` is the verdict's `not
    learned` filter (the study's: 0.01 on AR, 0.1 on ATR); `skip_missing_sites` drops site patterns
    this model lacks (e.g. `conv_out` without a conv); `analyses` adds `conv-window`
    (conv_window.parquet, conv_ablation.parquet) and `state` (state_curve.parquet, `state_readout`;
    models with a recurrent state that learned the task), an analysis that does not apply said so in one line
    to `on_note` (`inapplicable`; default: stderr); `method` "gradient" estimates the cells by
    attribution patching (`interchange`), `verify` of them exactly. Also written: accuracy.parquet
    (accuracy with Wilson intervals per subset and key distance) and, for single-answer tasks,
    examples.parquet (`example_table`: the same per example, for like-for-like comparisons).
    out: the directory written (default: the run directory). An analysis not asked for keeps its files
    (a conv-window table is read by the verdict); readouts of another kind, or read on other examples (n,
    seed, split: `check_replace`), are not written over unless `replace`.
    Read in the sufficiency direction, carriers.parquet (the full-window readout at the verdict's read
    point, which the verdict reads).
    """
    from mecheval import load_run

    out_dir = Path(out) if out is not None else Path(run_dir)
    if not replace:
        check_replace(out_dir, corrupt, direction, method, sites, positions, read_settings(n, seed, split))
    lm, task, cfg = load_run(run_dir)
    return intervene_model(out_dir, lm, task, corrupt, n, sites, positions, seed, split, direction, min_effect,
                           skip_missing_sites, analyses, method, verify, train_ids=_trained_on(run_dir, cfg),
                           on_note=on_note)


def intervene_model(
    out_dir: Path, lm, task, corrupt: list[str], n: int = N_EXAMPLES, sites: list[str] = ("*",),
    positions: list[Position] | None = None, seed: int = 0, split: str = "test", direction: str = "sufficiency",
    min_effect: float = 0.01, skip_missing_sites: bool = False, analyses: list[str] = (), method: str = "exact",
    verify: int = 0, train_ids=None, on_note: Callable[[str], None] = print_note,
) -> tuple[pd.DataFrame, Verdict | None]:
    """`intervene_run` on a model and task already built (an LM, or `mecheval.hf.wrap`'s), its outputs written
    into `out_dir` (earlier analyses not asked for kept). train_ids: the prompts the model trained on
    (`training.prompts`); the readouts then read only test prompts outside them (None: every prompt)."""
    unknown = sorted(set(analyses) - set(ANALYSES))
    if unknown:
        raise ValueError(f"unknown analyses {unknown}; known: {list(ANALYSES)}")
    out_dir = Path(out_dir)
    for text in inapplicable(lm, analyses):
        on_note(f"{out_dir.name}: {text}")
    # the layer profile: every block's input, and the last block's output (block i's output is i + 1's input)
    sites = list(dict.fromkeys([*sites, "resid_pre", f"layers.{len(lm.layers) - 1}.resid_post"]))
    if skip_missing_sites:
        sites = present_sites(list(lm.sites()), sites)
    batch, prompts = prompts_read(lm, task, n, seed, split, train_ids)
    masks = subsets(lm, batch)
    tables = [interchange(lm, task, batch, role, sites, positions, seed=seed, direction=direction, subsets=masks,
                          method=method, verify=verify) for role in corrupt]
    if VERDICT_ROLE in corrupt and positions is not None and JOINT not in positions:
        # the key and query patched together at every block input: what the direct-retrieval rule reads
        joint = interchange(lm, task, batch, VERDICT_ROLE, ["resid_pre"], [JOINT], seed=seed,
                            direction=direction, subsets=masks, method=method)
        tables.append(joint.assign(verified=None) if verify else joint)  # not among the verified candidates
    df = pd.concat(tables, ignore_index=True)
    safe_mkdir(out_dir, out_dir.parent)
    safe_unlink(out_dir / VERDICT, out_dir)  # until this call's is written, the run has none
    write_table(out_dir, "interventions.parquet", df)
    correct = correct_answers(lm, batch)
    write_table(out_dir, "accuracy.parquet", accuracy_table(correct, batch, masks))
    if batch.answer.dim() == 1:  # per example, so that runs read on these examples compare like for like
        write_table(out_dir, EXAMPLES, example_table(correct, batch, masks))
    kept = {f for name, files in KEPT.items() if name not in analyses for f in files}
    safe_mkdir(out_dir / "interventions", out_dir)
    for old in (out_dir / "interventions").glob("*.png"):  # a previous call's heatmaps and profiles
        if str(old.relative_to(out_dir)) not in kept:
            safe_unlink(old, out_dir)
    role = VERDICT_ROLE if VERDICT_ROLE in corrupt else corrupt[0]
    outside = batch.select(masks["outside"].nonzero()[:, 0]) if masks["outside"].any() else batch
    window = _optional(out_dir / "conv_window.parquet")  # an earlier call's, unless recomputed here
    if "conv-window" in analyses and short_convs(lm):
        window = conv_window(lm, task, outside, corrupt=role, seed=seed)
        write_table(out_dir, "conv_window.parquet", window)
        write_table(out_dir, "conv_ablation.parquet", conv_ablation(lm, outside))
        if not window.empty:
            conv_window_heatmap(window, out_dir / "interventions" / "conv_window.png", title=textwrap.fill(out_dir.name, 48))
    if "two-token" in analyses and two_token_sites(lm):
        write_table(out_dir, TWO_TOKEN, two_token_ablation(lm, outside))
    shown_subset = "outside" if masks["outside"].any() else "all"
    shown = df[df["subset"] == shown_subset]
    for (r, site), part in shown.groupby(["corrupt", "site"], sort=False):
        title = f"{textwrap.fill(out_dir.name, 36)}\ncorrupt {r}, {site}, {shown_subset} (n = {int(part['n'].iloc[0])})"
        heatmap(part, site, out_dir / "interventions" / f"{r}_{site}.png", title=title)
    for r, part in shown.groupby("corrupt", sort=False):
        title = f"{textwrap.fill(out_dir.name, 48)}\ncorrupt {r}, {shown_subset} (n = {int(part['n'].iloc[0])})"
        layer_profile(part, out_dir / "interventions" / f"{r}_profile.png", title=title)
    reads = VERDICT_ROLE in corrupt and direction == "sufficiency"
    verdict, carriers, pointer = (read_with_controls(lm, task, batch, df, masks, VERDICT_ROLE, min_effect, window, seed)
                                  if reads else (None, None, None))
    for name, table in (("carriers.parquet", carriers), (POINTER, pointer)):
        if table is not None:
            write_table(out_dir, name, table)
        else:  # a previous call's, read with the verdict this call does not write
            safe_unlink(out_dir / name, out_dir)
    if "state" in analyses and state_sites(lm):
        if verdict is None or shows_attributions(verdict.label):
            write_state_readout(out_dir, lm, task, outside, role, seed)
        else:
            on_note(f"{out_dir.name}: the state analysis is skipped: the model did not learn the task (its readout would be noise)")
    if verdict is not None:
        write_verdict(out_dir, verdict, min_effect, prompts=prompts)
    return df, verdict


def read_settings(n: int, seed: int, split: str) -> dict:
    """The READ_SETTINGS of a readout of n examples of `split` drawn with `seed`."""
    return dict(zip(READ_SETTINGS, (n, seed, split)))


def prompts_read(lm, task, n: int, seed: int, split: str, train_ids) -> tuple:
    """(the readouts' batch: n `split` examples whose prompts the model did not train on, `unseen_sample`; the
    PROMPT_FIELDS: its provenance and the accuracy on the first n prompts drawn, seen or not, the reading the
    published study's figures compare with)."""
    batch, prompts = unseen_sample(task, n, seed, split, train_ids)
    prompts |= read_settings(n, seed, split)
    if prompts["prompts"] == "unseen":
        every = task.sample(n, seed=seed, split=split)
        correct = correct_answers(lm, every)
        k, m = int(correct.sum()), correct.numel()
        lo, hi = accuracy_interval(k, m)
        prompts |= {"acc_all_prompts": k / m, "acc_all_prompts_lo": lo, "acc_all_prompts_hi": hi, "n_all_prompts": m}
    return batch, prompts


def read_point_attributions(df: pd.DataFrame, corrupt: str) -> dict:
    """Attribution per role (and the effect) at the verdict's read point, for a corrupted role without a label:
    {"layer", "effect", "key", "value", "query"} (NaN where the table lacks the role)."""
    rows = df[(df["corrupt"] == corrupt) & (df["direction"] == "sufficiency")]
    if "subset" in rows:
        rows = rows[rows["subset"] == ("outside" if (rows["subset"] == "outside").any() else "all")]
    site, layer = read_point(rows)
    at = rows[(rows["site"] == site) & (rows["layer"] == layer)].set_index("position")
    effect = float(at["p_clean"].iloc[0] - at["p_corrupt"].iloc[0])
    return {"layer": layer, "effect": effect} | {r: float(at.at[r, "attrib"]) if r in at.index else float("nan")
                                                 for r in ROLES}
