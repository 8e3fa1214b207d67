"""Drops the final weights of committed runs that did not learn (the commit rule, docs/development.md).

A run whose verdict is `not learned` has no mechanism to read: nothing reads its weights, and its accuracy is in
summary.json and its readout tables. Its weights go only where the file's digest equals the one summary.json
keeps (`mecheval reproduce RUN --restore` retrains the run bitwise against that digest and writes them back).

    .venv/bin/python tools/landing/drop_unlearned_weights.py results/cpu/STUDY [...]     (run by tools/queues/land.sh)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mecheval.interventions.verdict import NOT_LEARNED
from mecheval.training.checkpoint import read_tensors, weights_digest
from mecheval.training.run_dir import MODEL, RunDir


def unlearned_weights(root: Path) -> list[Path]:
    """The weights under `root` (a study, sweep or run directory) of runs whose verdict is `not learned`."""
    return sorted(w for w in root.rglob(MODEL) if (w.parent / "verdict.json").exists()
                  and json.loads((w.parent / "verdict.json").read_text()).get("verdict") == NOT_LEARNED)


def drop(weights: Path) -> str | None:
    """Removes `weights` where the run's summary.json keeps their digest; else the reason it stays."""
    digest = RunDir(weights.parent).read_summary().get("weights_sha256")
    if digest != weights_digest(read_tensors(weights)[0]):
        return f"{weights}: kept, its summary.json has {'another' if digest else 'no'} weights digest"
    weights.unlink()
    return None


def main(roots: list[str]) -> int:
    kept = [reason for root in roots for w in unlearned_weights(Path(root)) if (reason := drop(w))]
    print("\n".join(kept), file=sys.stderr)
    return 1 if kept else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
