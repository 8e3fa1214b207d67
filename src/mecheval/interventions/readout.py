"""A model's readouts as a value: the tables and the verdict a `ReadoutSpec` asks for, nothing written.

    compute_readout(lm, task, spec, train_ids) -> Readout   what `runs.intervene_model` writes (`runs.py`)

The examples are `spec.n` prompts of `spec.split` not seen in training (`prompts_read`), every table split by the
receptive-field artefact (`artefact.subsets`); the analyses and the verdict read the examples outside the conv
reach (all of them where none is).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd
from tqdm import tqdm

from mecheval.interventions.accuracy import accuracy_table, correct_answers, example_table
from mecheval.interventions.artefact import distance_subsets, short_convs, subsets
from mecheval.interventions.carriers import carriers_table
from mecheval.interventions.conv_window import conv_ablation, conv_window
from mecheval.interventions.metrics import accuracy_interval
from mecheval.interventions.patching import interchange
from mecheval.interventions.pointer import pointer_control
from mecheval.interventions.spec import VERDICT_ROLE, ReadoutSpec
from mecheval.interventions.state_readout import state_curve, state_sites
from mecheval.interventions.terms import TERMS, term_ablation, term_sites
from mecheval.interventions.verdict import (JOINT, ROLES, Accuracy, NothingToRead, Verdict, mechanism, read_point,
                                            shows_attributions)
from mecheval.models.sites import matches
from mecheval.training.prompts import unseen_sample

STATE_EXAMPLES = 512  # the state readout reads at most the first 512 examples (its cost is O(T · state) per example and point)
NEEDS = {  # analysis -> (the part of the model it reads, found; the part named where the model lacks it)
    "conv-window": (short_convs, "short convolution (the analysis reads where one binds key and value)"),
    "state": (state_sites, "recurrent state (the analysis reads the answer each layer's state carries)"),
} | {name: (lambda lm, term=term: term_sites(lm, term), term.lacks) for name, term in TERMS.items()}
READ_SETTINGS = {"n_examples": "n", "read_seed": "seed", "split": "split"}  # verdict.json: the examples a readout
# was asked for, each field by the argument that set it (`read_seed`, not `seed`: a study's table joins verdict fields
# to the run's config, whose `seed` is the training seed)
PROMPT_FIELDS = (*READ_SETTINGS, "prompts", "seen_share", "n_drawn", "acc_all_prompts", "acc_all_prompts_lo",
                 "acc_all_prompts_hi", "n_all_prompts")  # verdict.json: which prompts were read (`prompts_read`)


@dataclass(frozen=True)
class Readout:
    """The readouts of one model (`compute_readout`), each table as `runs.py` writes it; None where not read."""

    spec: ReadoutSpec
    interventions: pd.DataFrame  # every (corrupt role, subset, layer, site, position) cell: interventions.parquet
    accuracy: pd.DataFrame  # per artefact subset and key distance, with Wilson 95% intervals
    prompts: dict  # PROMPT_FIELDS: which prompts were read, and the accuracy on all prompts
    examples: pd.DataFrame | None = None  # the accuracy per example (single-answer tasks)
    conv_window: pd.DataFrame | None = None  # analysis conv-window (a model with a short conv)
    conv_ablation: pd.DataFrame | None = None  # beside it
    terms: dict[str, pd.DataFrame] = field(default_factory=dict)  # analyses two-token, rotary: `terms.TERMS`
    carriers: pd.DataFrame | None = None  # the full-window readout at the verdict's read point
    pointer: pd.DataFrame | None = None  # the pointer control there (a model that learned, a task with a move)
    state_curve: pd.DataFrame | None = None  # analysis state (a model with a state that learned)
    state_n: int = 0  # the examples the state readout read
    verdict: Verdict | None = None  # key corruption, sufficiency, where there is something to read


def print_note(text: str) -> None:
    """A note beside the progress bars (stderr)."""
    tqdm.write(text, file=sys.stderr)


def compute_readout(
    lm, task, spec: ReadoutSpec, train_ids=None, window: pd.DataFrame | None = None,
    on_note: Callable[[str], None] = print_note,
) -> Readout:
    """The readouts of `spec` on a model and task (an LM, or `mecheval.hf.wrap`'s). train_ids: the prompts the
    model trained on (`training.prompts`; None: every prompt may be read). window: an earlier conv-window table,
    which the verdict reads unless this spec computes one. An analysis that does not apply, or is skipped, says
    so in one line to `on_note`: a model without the part it reads (`inapplicable`), the state readout of a
    model that did not learn (noise)."""
    for text in inapplicable(lm, spec.analyses):
        on_note(text)
    batch, prompts = prompts_read(lm, task, spec.n, spec.seed, spec.split, train_ids)
    masks = subsets(lm, batch)
    df = interventions_table(lm, task, batch, masks, spec)
    correct = correct_answers(lm, batch)
    out = {"interventions": df, "accuracy": accuracy_table(correct, batch, masks), "prompts": prompts}
    if batch.answer.dim() == 1:  # per example, so that runs read on these examples compare like for like
        out["examples"] = example_table(correct, batch, masks)
    role = spec.analysed_role
    outside = outside_of(batch, masks)
    if "conv-window" in spec.analyses and short_convs(lm):
        window = out["conv_window"] = conv_window(lm, task, outside, corrupt=role, seed=spec.seed)
        out["conv_ablation"] = conv_ablation(lm, outside)
    out["terms"] = term_tables(lm, outside, spec.analyses)
    if spec.labelled:
        accuracy = Accuracy(out["accuracy"], task.chance_accuracy)
        out["verdict"], out["carriers"], out["pointer"] = read_with_controls(
            lm, task, batch, df, masks, VERDICT_ROLE, spec.min_effect, window, spec.seed, accuracy)
    verdict = out.get("verdict")
    if "state" in spec.analyses and state_sites(lm):
        if verdict is None or shows_attributions(verdict.label):
            read = outside.select(slice(0, STATE_EXAMPLES))
            out["state_curve"], out["state_n"] = state_curve(lm, task, read, corrupt=role, seed=spec.seed), len(read)
        else:
            on_note("the state analysis is skipped: the model did not learn the task (its readout would be noise)")
    return Readout(spec=spec, **out)


def outside_of(batch, masks: dict):
    """The examples the analyses read: those outside the conv reach (`artefact.subsets`), all where none is."""
    return batch.select(masks["outside"].nonzero()[:, 0]) if masks["outside"].any() else batch


def term_tables(lm, outside, analyses) -> dict:
    """{analysis: its `term_ablation` table} for each term analysis among `analyses` that the model has."""
    return {name: term_ablation(lm, outside, term) for name, term in TERMS.items()
            if name in analyses and term_sites(lm, term)}


def interventions_table(lm, task, batch, masks: dict, spec: ReadoutSpec) -> pd.DataFrame:
    """Every corrupted role's `interchange` table at the spec's sites and the layer profile (every block's input,
    and the last block's output), then, where the spec's positions leave it out, the joint key&query patch at
    every block input (what the direct-retrieval rule reads; never among the verified cells)."""
    sites = list(dict.fromkeys([*spec.sites, "resid_pre", f"layers.{len(lm.layers) - 1}.resid_post"]))
    if spec.skip_missing_sites:
        sites = present_sites(list(lm.sites()), sites)
    options = {"seed": spec.seed, "direction": spec.direction, "subsets": masks, "method": spec.method}
    positions = None if spec.positions is None else list(spec.positions)
    tables = [interchange(lm, task, batch, role, sites, positions, **options, verify=spec.verify) for role in spec.corrupt]
    if VERDICT_ROLE in spec.corrupt and positions is not None and JOINT not in positions:
        joint = interchange(lm, task, batch, VERDICT_ROLE, ["resid_pre"], [JOINT], **options)
        tables.append(joint.assign(verified=None) if spec.verify else joint)
    return pd.concat(tables, ignore_index=True)


def present_sites(names: list[str], patterns: list[str]) -> list[str]:
    """The patterns that match at least one site name (a bare kind means `layers.*.kind`)."""
    return [p for p in patterns if matches(names, p)]


def inapplicable(lm, analyses) -> list[str]:
    """One line per asked analysis that does not apply to `lm`, saying why (it lacks the part the analysis reads)."""
    return [f"the {a} analysis does not apply: the model has no {NEEDS[a][1]}" for a in analyses if not NEEDS[a][0](lm)]


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


def read_verdict(
    df: pd.DataFrame, window: pd.DataFrame | None, corrupt: str, min_effect: float, carriers: pd.DataFrame | None = None,
    pointer: pd.DataFrame | None = None, accuracy: Accuracy | None = None,
) -> Verdict | None:
    """The verdict of an interventions table (sufficiency rows with `resid_pre` at the key, value and query), None
    where it has nothing to read; accuracy: the accuracy on the examples read, against chance (`verdict.Accuracy`)."""
    at_read = df[(df["site"] == "resid_pre") & (df["corrupt"] == corrupt)]
    if not set(ROLES) <= set(at_read["position"].astype(str)):  # e.g. only --positions key+1 was patched
        return None
    try:
        return mechanism(df, corrupt=corrupt, min_effect=min_effect, conv_window=window, carriers=carriers, pointer=pointer,
                         accuracy=accuracy)
    except NothingToRead:  # a 1-layer model without a conv: nothing to read but the embedding
        return None


def read_with_controls(
    lm, task, batch, df: pd.DataFrame, masks: dict, corrupt: str, min_effect: float, window: pd.DataFrame | None,
    seed: int = 0, accuracy: Accuracy | None = None,
) -> tuple[Verdict | None, pd.DataFrame | None, pd.DataFrame | None]:
    """(the verdict, the full-window table, the pointer control): `read_verdict`, then at its read point the
    full-window readout (`carriers.py`; also by the queried key's distance from the answer, subsets `distance
    d`: where the artefact control's trivial readouts are) and, for a model that learned, the pointer control
    (`pointer.py`, on the verdict's subset; tasks with `Task.move`), and the verdict decided again with both
    (single-answer batches; else without them); accuracy as `read_verdict`'s."""
    verdict = read_verdict(df, window, corrupt, min_effect, accuracy=accuracy)
    if verdict is None or batch.answer.dim() != 1:
        return verdict, None, None
    carriers = carriers_table(lm, task, batch, corrupt, verdict.site, verdict.layer, seed=seed,
                              subsets=masks | distance_subsets(batch))
    pointer = None if verdict.label == "not learned" else pointer_at(lm, task, batch, masks, verdict.site,
                                                                      verdict.layer, verdict.subset, seed)
    return read_verdict(df, window, corrupt, min_effect, carriers, pointer, accuracy), carriers, pointer


def pointer_at(lm, task, batch, masks: dict, site: str, layer: int, subset: str, seed: int) -> pd.DataFrame | None:
    """The pointer control (`pointer.pointer_control`) at the read point on the verdict's subset; None where the
    task defines no move (`Task.move`)."""
    try:
        return pointer_control(lm, task, batch, site, layer, seed=seed, mask=masks.get(subset))
    except NotImplementedError:
        return None


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
