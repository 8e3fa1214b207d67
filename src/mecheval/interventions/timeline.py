"""When does a mechanism form: the readouts of `intervene_run` at every snapshot of a run.

`timeline(RUN_DIR)` reads the weights kept during training (`snapshots:` in the config,
`snapshots/step-*.safetensors`) and, at each step, on one fixed batch (test split, `seed`): the
accuracy (Wilson 95%), the clean residual patched in at the key, value and query at the input of
every layer (key corrupted, with bootstrap 95% intervals), the verdict with its read point (read with the
full-window readout and the pointer control there, as the final verdict is; on every test prompt, seen in
training or not), and, where
the model has a short conv and has learned the task, the conv-window cell that restores most. Everything is read on the
examples outside the conv reach (`artefact.py`), as the final readout is.

RUN_DIR/timeline.parquet, one row per (step, boundary, role):
    step, boundary (i: the input of layer i), role, attrib, attrib_lo, attrib_hi,
    verdict, read_layer, acc, acc_lo, acc_hi, n, conv_cell, conv_attrib
and the parameters it was computed with (n_examples, corrupt, seed, fingerprint, the verdict rules, the positions
patched: the roles and the joint key&query patch that decides direct retrieval, as in the final readout). A second call
computes only the snapshots not yet in the file (same parameters), writing after each one, so a killed
call loses at most one snapshot's work; other parameters start the file afresh.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from tqdm import tqdm

from mecheval.common import atomic_write_bytes
from mecheval.interventions.accuracy import accuracy_table, correct_answers
from mecheval.interventions.artefact import short_convs, subsets
from mecheval.interventions.conv_window import best_cell, conv_window
from mecheval.interventions.patching import interchange
from mecheval.interventions.readout import read_verdict, read_with_controls
from mecheval.interventions.runs import VERDICT_RULES
from mecheval.interventions.verdict import JOINT, ROLES, Accuracy
from mecheval.training.lock import run_locked

TIMELINE = "timeline.parquet"
PARAMS = ("n_examples", "corrupt", "seed", "fingerprint", "rules", "positions")  # `rules`: the verdict rules
# (runs.VERDICT_RULES); `positions`: those patched at each snapshot (POSITIONS; a timeline without, read before the
# joint key&query patch joined them, decided direct retrieval by the published sum: it is computed afresh)
POSITIONS = (*ROLES, JOINT)  # the roles the table keeps, and the joint patch that decides direct retrieval


@run_locked
def timeline(run_dir: str | Path, n: int = 256, corrupt: str = "key", seed: int = 0, min_effect: float = 0.01,
             quiet: bool = True) -> pd.DataFrame:
    """The timeline table of a run (module docstring), computed where missing; returns all of it."""
    from mecheval.models import build_model
    from mecheval.tasks import make_task
    from mecheval.training.run_dir import RunDir, load_snapshot, snapshot_steps

    run_dir = Path(run_dir)
    cfg = RunDir(run_dir).read_config()
    steps = snapshot_steps(run_dir)
    if not steps:
        raise FileNotFoundError(f"{run_dir}: no snapshots (train with `snapshots: {{every: N}}` to keep them)")
    params = {"n_examples": n, "corrupt": corrupt, "seed": seed, "fingerprint": cfg.fingerprint(), "rules": VERDICT_RULES,
              "positions": ",".join(POSITIONS)}
    done = _previous(run_dir / TIMELINE, params)
    task = make_task(cfg.task.name, **cfg.task.params)
    lm = build_model(cfg.model).eval()
    batch = task.sample(n, seed=seed, split="test")
    masks = subsets(lm, batch)  # depends on the architecture only: the same examples at every step
    subset = "outside" if masks["outside"].any() else "all"
    read = batch.select(masks[subset].nonzero()[:, 0])
    for step in tqdm([s for s in steps if s not in set(done["step"])], desc=run_dir.name, unit="snapshot", disable=quiet):
        load_snapshot(lm, run_dir, step)
        part = _readout(lm, task, batch, masks, read, subset, corrupt, min_effect).assign(step=step, **params)
        done = (part if done.empty else pd.concat([done, part], ignore_index=True)).sort_values(
            ["step", "boundary", "role"], ignore_index=True)
        atomic_write_bytes(run_dir / TIMELINE, done.to_parquet(index=False), run_dir)
    return done


def _previous(path: Path, params: dict) -> pd.DataFrame:
    """The rows already computed with these parameters (none if the file is absent or was made otherwise)."""
    if not path.exists():
        return pd.DataFrame(columns=["step"])
    old = pd.read_parquet(path)
    same = all(k in old and (old[k] == v).all() for k, v in params.items())
    return old if same else pd.DataFrame(columns=["step"])


def _readout(lm, task, batch, masks, read, subset, corrupt, min_effect) -> pd.DataFrame:
    """The readouts of one snapshot: rows per (boundary, role)."""
    df = interchange(lm, task, batch, corrupt, ["resid_pre"], list(POSITIONS), subsets=masks)
    table = accuracy_table(correct_answers(lm, batch), batch, masks)
    acc, accuracy = table.set_index("subset").loc[subset], Accuracy(table, task.chance_accuracy)
    verdict = read_verdict(df, None, corrupt, min_effect, accuracy=accuracy)
    learned = verdict is None or verdict.label != "not learned"  # where nothing is learned, no conv binds
    window = conv_window(lm, task, read, corrupt=corrupt) if short_convs(lm) and learned else None
    if verdict is not None:
        verdict, _, _ = read_with_controls(lm, task, batch, df, masks, corrupt, min_effect, window, accuracy=accuracy)
    label, read_layer = (None, None) if verdict is None else (verdict.label, verdict.layer)
    cell = None if window is None or window.empty else best_cell(window)
    rows = df[(df["subset"] == subset) & df["position"].isin(ROLES)].copy()
    rows["boundary"] = rows["layer"]
    rows = rows.rename(columns={"position": "role"})[["boundary", "role", "attrib", "attrib_lo", "attrib_hi"]]
    return rows.assign(
        verdict=label, read_layer=read_layer, acc=acc["acc"], acc_lo=acc["acc_lo"], acc_hi=acc["acc_hi"], n=int(acc["n"]),
        conv_cell=None if cell is None else f"L{int(cell['layer'])} key+{int(cell['offset'])}",
        conv_attrib=None if cell is None else float(cell["attrib"]),
    )


def formed_at(table: pd.DataFrame) -> int | None:
    """The first snapshot step from which the verdict stays the final one (None where the final verdict is
    `not learned` or missing)."""
    per_step = table.drop_duplicates("step").sort_values("step")[["step", "verdict"]]
    if per_step.empty:
        return None
    final = per_step["verdict"].iloc[-1]
    if final is None or final != final or final == "not learned":
        return None
    differs = per_step[per_step["verdict"] != final]
    later = per_step[per_step["step"] > differs["step"].max()] if len(differs) else per_step
    return int(later["step"].iloc[0])
