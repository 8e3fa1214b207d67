"""A study's results as one table: a row per run with its architecture label, accuracy and verdict."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mecheval.interventions.runs import SPLITS, VERDICT, split_dir
from mecheval.store import identity, runs
from mecheval.sweeps.table import RECORDED, best_lr, collect, runs_dir
from mecheval.tasks import chance_accuracy

ACC = "summary.final.test.acc"
HELDOUT_ACC = "summary.final.heldout.acc"  # ATR's generalisation split, where the study evaluates it
HELDOUT_VALUE = "heldout.attrib@value"  # attrib@value read on that split (`study.presets.Study.splits`)
HELDOUT_READ_ACC = "heldout.acc_all"  # accuracy on that readout's examples, with its Wilson interval
VERDICT_FIELDS = ("verdict", "detail", "effect", "attrib@key", "attrib@value", "attrib@query")  # always present


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
    best = set(best_lr(df)["name"])
    root = runs_dir(study_dir)
    found = [identity.recorded(root / name) or identity.derive(row) for name, (_, row) in zip(df["name"], df.iterrows())]
    df = df.drop(columns=[c for c in df if c.startswith(RECORDED)])
    df["arch_name"] = pd.Series([i.arch_name for i in found], index=df.index, dtype=object)
    df["arch_conv"] = pd.Series([i.arch_conv for i in found], index=df.index, dtype=object)  # None: the default
    df["arch"] = [i.arch for i in found]
    df["acc"] = df.get(ACC)
    if HELDOUT_ACC in df:
        df["acc_heldout"] = df[HELDOUT_ACC]
    df["best_lr"] = df["name"].isin(best)
    df["chance"] = [chance_accuracy(runs.config(root / name)["task"]) for name in df["name"]]
    df["run_dir"] = [str(root / name) for name in df["name"]]
    dirs = [root / name for name in df["name"]]
    verdicts = [runs.verdict(d) for d in dirs]
    fields = list(dict.fromkeys([*VERDICT_FIELDS, *(k for v in verdicts for k in v)]))
    # the verdict, its detail and intervals, and the accuracy it rests on (`intervene_run`)
    columns = {f: [v.get(f) for v in verdicts] for f in fields}
    for split in sorted({p.parent.name for d in dirs for p in (d / SPLITS).glob(f"*/{VERDICT}")}):
        verdicts = [runs.verdict(split_dir(d, split)) for d in dirs]  # a further split's readout, as `split.field`
        columns |= {f"{split}.{f}": [v.get(f) for v in verdicts] for f in dict.fromkeys(k for v in verdicts for k in v)}
    return pd.concat([df.drop(columns=[c for c in columns if c in df]), pd.DataFrame(columns, index=df.index)],
                     axis=1)

