"""The README's tables "At the published scale", from the committed run directories (no model is run).

Usage: python results/paper-d64/readme_tables.py [STUDY_DIR ...]   (default: every directory here)
One markdown row per finished run: accuracy on the 1,024 test examples of its last evaluation, the
readout's accuracy outside the conv reach (Wilson 95% interval, n examples), the verdict with its
attributions (bootstrap 95% intervals) at the read point, where a short conv binds key and value (best
conv-output cell and the accuracy with that layer's lagged taps zeroed; none for a run that did not
learn, whose attributions are noise), and the step of an early stop.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from mecheval.training.run_dir import RunDir

HERE = Path(__file__).parent


def interval(d: dict, key: str) -> str:
    return f"{d[key]:.2f} [{d[key + '_lo']:.2f}, {d[key + '_hi']:.2f}]"


def accuracy_read(v: dict) -> str:
    """The readout's accuracy outside the conv reach with its n; all examples where none lies outside (H3)."""
    if "acc_outside" in v:
        return f"{interval(v, 'acc_outside')} ({v['n_outside']})"
    return f"{interval(v, 'acc_all')} ({v['n_all']}, all: none outside the reach)"


def conv_binding(run: Path) -> str:
    """`layer L key+o: a` for the conv output that restores most, and the accuracy without that layer's lagged taps."""
    if not (run / "conv_window.parquet").exists():
        return "–"
    cw = pd.read_parquet(run / "conv_window.parquet")
    cells = cw[(cw.site == "conv_out") & (cw.direction == "sufficiency") & ~cw.joint]
    if cells.empty:
        return "–"
    best = cells.loc[cells.attrib.idxmax()]
    text = f"layer {best.layer} key+{best.offset}: {best.attrib:.2f}"
    abl = pd.read_parquet(run / "conv_ablation.parquet")
    cut = abl[(abl.layers == str(best.layer)) & (abl.lags == ">=1")]
    return text + (f"; taps cut → {cut.acc.iloc[0]:.2f}" if len(cut) else "")


def row(run: Path) -> str | None:
    summary, verdict = run / "summary.json", run / "verdict.json"
    if not summary.exists():
        return None
    s = json.loads(summary.read_text())
    evals = [m["eval"]["test"]["acc"] for m in RunDir(run).read_metrics() if "eval" in m]  # metrics.jsonl or .gz
    stop = f"{s['steps']:,}" + (" (early stop)" if s.get("stopped_early") else "")
    if not verdict.exists():
        return f"| {run.name} | {evals[-1]:.3f} | – | not read | – | – | – | – | {stop} |"
    v = json.loads(verdict.read_text())
    learned = v["verdict"] != "not learned"  # else the attributions and conv cells are noise
    attribs = [interval(v, f"attrib@{r}") if learned and f"attrib@{r}_lo" in v else "–" for r in ("key", "value", "query")]
    outside = accuracy_read(v)
    return f"| {run.name} | {evals[-1]:.3f} | {outside} | {v['verdict']} | {' | '.join(attribs)} | {conv_binding(run) if learned else '–'} | {stop} |"


def table(study: Path) -> str:
    runs = sorted(p for p in (study / "runs").iterdir() if p.is_dir())
    head = ("| run | test acc | acc outside conv reach (n) | verdict | @key | @value | @query | conv binding | steps |\n"
            "|---|---|---|---|---|---|---|---|---|")
    return "\n".join([f"**{study.name}**", "", head, *filter(None, map(row, runs))])


if __name__ == "__main__":
    studies = [Path(p) for p in sys.argv[1:]] or sorted(p for p in HERE.iterdir() if (p / "runs").is_dir())
    print("\n\n".join(table(s) for s in studies))
