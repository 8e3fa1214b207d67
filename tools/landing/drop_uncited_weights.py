"""Drops the final weights of committed runs that no finding reads (the commit rule, docs/development.md).

A finding reads a learned run at its comparison's best learning rate: the best rate of its group within its study
(`best_lr`) and, at the published scale (results/paper-d*), its cell's best rate over every committed study of
that scale (`pages.rates.rate_table`'s, the rates figure's). Every other run (a run that did not learn, a bracket's
worse rate) is read from summary.json and its readout tables only, so its weights go, only where the file's digest
equals the one summary.json keeps: `mecheval reproduce RUN --restore` retrains the run bitwise against that digest
and writes them back. A run without a readout keeps its weights.

    PYTHONPATH=tools .venv/bin/python -m landing.drop_uncited_weights results/paper-d64/STUDY [...]   (land.sh)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from mecheval.interventions.verdict import NOT_LEARNED
from mecheval.report.results import study_table
from mecheval.training.checkpoint import read_tensors, weights_digest
from mecheval.training.run_dir import MODEL, RunDir
from pages.overview_blocks import rates_data
from pages.rates import CELL, committed_runs

PUBLISHED_SCALE = "paper-d"  # results/paper-d64/...: a published-scale study, pooled with its scale's others


def uncited_runs(study: Path, root: Path = Path(".")) -> list[Path]:
    """The finished runs of `study` (a study, sweep or folder of runs) whose weights no finding reads (module
    docstring); `root`: the repository whose results/ a published-scale study is pooled with."""
    table = study_table(study, every_run=True)
    done = table[table["status"] == "done"]
    read = done["best_lr"] & (done["verdict"] != NOT_LEARNED)
    if study.resolve().parent.name.startswith(PUBLISHED_SCALE):
        rates = rates_data(root.resolve())
        best = set(rates.loc[rates["best"], ["task", "grammar", "arch", "width", "lr"]]
                   .itertuples(index=False, name=None))
        cells = committed_runs([table]).set_index("run_dir")  # a run outside them (published grammar) is not pooled
        pooled = [run not in cells.index or _rate(cells.loc[run]) in best for run in done["run_dir"]]
        read &= pd.Series(pooled, index=done.index)
    return sorted(Path(run) for run in done.loc[done["verdict"].notna() & ~read, "run_dir"])


def _rate(run: pd.Series) -> tuple:
    """A `committed_runs` row's (task, grammar, arch, width, lr), as `rate_table` keys its rows."""
    task, grammar, arch, width = run[CELL]
    return task, grammar, arch, int(width), float(run["optim.lr"])


def drop(weights: Path) -> str | None:
    """Removes `weights` where the run's summary.json keeps their digest; else the reason it stays."""
    digest = RunDir(weights.parent).read_summary().get("weights_sha256")
    if digest != weights_digest(read_tensors(weights)[0]):
        return f"{weights}: kept, its summary.json has {'another' if digest else 'no'} weights digest"
    weights.unlink()
    return None


def main(studies: list[str], root: Path = Path(".")) -> int:
    """Drops the uncited weights of each study; 1 where some stay (their reasons on stderr)."""
    kept = [reason for study in studies for run in uncited_runs(Path(study), root)
            if (run / MODEL).exists() and (reason := drop(run / MODEL))]
    print("\n".join(kept), file=sys.stderr)
    return 1 if kept else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
