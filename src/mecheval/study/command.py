"""The `mecheval study` command that makes (and resumes) a study directory, read back from its files.

A study directory holds its spec (`sweep.yaml`, what `Study.sweep` wrote) and `study.json` (preset and
scale, the architectures as given); the command line follows from them: the grid's widths, rates, seeds and
grammars, the ATR grammar draw, the base's early stop, training order and experiment trackers, the architectures (where not the
preset's whole list), the models' build (where not the scale's default).
Running it again resumes the study. `study_axes` parses it back into `Study.sweep`'s keyword arguments;
`rebuilds_spec` says whether those rebuild the committed spec (not where the preset has changed since).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from mecheval.plugins import is_import_path
from mecheval.report.analyse import study_meta
from mecheval.store import studies
from mecheval.study.presets import PAPER_TRAIN_ORDER, SCALES, STUDIES, default_build, point_label
from mecheval.sweeps.runner import SPEC
from mecheval.training.config import ADDED_LATER
from mecheval.training.loggers import MODULES as TRACKERS

GRID_FLAGS = {"model.d_model": "--widths", "optim.lr": "--lrs", "seed": "--seeds", "task.params.grammar": "--grammars"}


def study_command(study_dir: Path, out: str | None = None) -> str | None:
    """The command line that makes `study_dir` (`--out out`, default the directory as given); None where
    it has no spec or no study.json (hand-made runs)."""
    spec_path, meta_path = study_dir / SPEC, study_dir / studies.STUDY_JSON
    if not spec_path.exists() or not meta_path.exists():
        return None
    spec, meta = studies.spec(spec_path), study_meta(study_dir)
    if meta.get("preset") not in STUDIES or meta.get("scale") not in SCALES:  # not made by `mecheval study`
        return None
    words = ["mecheval", "study", meta["preset"], "--scale", meta["scale"]]
    for key, flag in GRID_FLAGS.items():
        if key in spec.grid:
            words += [flag, ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in spec.grid[key])]
    archs = meta.get("archs") or [point_label(p) for p in spec.points]  # as given (a plug-in by import path)
    if archs != [point_label(p) for p in STUDIES[meta["preset"]].sweep(meta["scale"])["list"]]:
        words += ["--archs", ",".join(archs)]
    base = spec.base
    if "early_stop" in base:
        words.append("--early-stop")
    draw = base.get("task", {}).get("params", {}).get("grammar_draw", ADDED_LATER["task.params.grammar_draw"])
    if draw != ADDED_LATER["task.params.grammar_draw"]:
        words += ["--grammar-draw", draw]
    builds = {p.get("model.build", ADDED_LATER["model.build"]) for p in spec.points}
    defaults = {default_build(p.get("model.preset"), meta["scale"] == "paper") for p in spec.points}
    if builds != defaults and len(builds) == 1:  # every point built one way (`--build`), not the scale's default
        words += ["--build", builds.pop()]
    order = base.get("train_order", ADDED_LATER["train_order"])  # a spec older than the field: its default then
    if meta["scale"] == "paper" and order != PAPER_TRAIN_ORDER:
        words += ["--train-order", order]
    words += [f"--{t}" for t in TRACKERS if base.get("loggers", {}).get(t)]
    return shlex.join([*words, "--out", out or str(study_dir)])


def study_axes(command: str) -> tuple[str, str, dict]:
    """(preset, scale, `Study.sweep` keyword arguments) of a `study_command` line."""
    words = shlex.split(command)
    flags, rest = {}, iter(words[3:])
    alone = {"--early-stop", *(f"--{t}" for t in TRACKERS)}
    for word in rest:  # --early-stop and the trackers alone; every other flag with its value
        flags[word] = True if word in alone else next(rest)
    number = {"--widths": int, "--lrs": float, "--seeds": int, "--grammars": str}
    axes = {flag[2:]: [number[flag](v) for v in flags[flag].split(",")] for flag in number if flag in flags}
    axes |= {"archs": flags["--archs"].split(",")} if "--archs" in flags else {}
    axes |= {"early_stop": "--early-stop" in flags, "train_order": flags.get("--train-order")}
    axes |= {"grammar_draw": flags["--grammar-draw"]} if "--grammar-draw" in flags else {}
    axes |= {"build": flags["--build"]} if "--build" in flags else {}
    chosen = [t for t in TRACKERS if f"--{t}" in flags]
    axes |= {"trackers": chosen} if chosen else {}
    return words[2], flags["--scale"], axes


def rebuilds_spec(study_dir: Path) -> bool | None:
    """Does `study_command(study_dir)` rebuild the committed spec (grid, points and base alike)? None where
    its architectures name a plug-in: the check would import that code, and a study directory may come from
    anyone."""
    preset, scale, axes = study_axes(study_command(study_dir))
    if any(is_import_path(a) for a in axes.get("archs") or []):
        return None
    try:
        built = STUDIES[preset].sweep(scale, **axes)
    except ValueError:  # an architecture the preset no longer has
        return False
    spec = studies.spec(study_dir / SPEC)
    return (built["grid"], built["list"], built["base"]) == (spec.grid, spec.points, spec.base)
