"""A finished run retrained from its config, its final weights compared with the run's, bitwise.

Training on a CPU is deterministic for a given thread count (the data, the initialisation and the order of every
reduction follow from the config), so a run whose weights are not committed is still checkable: its summary.json
keeps a digest of its final weights (`checkpoint.weights_digest`: SHA-256 over each tensor's name, dtype, shape and bytes)
and the thread count it trained with. `reproduce` retrains the run in a scratch directory with those threads
(a run from before they were recorded: 1, then the machine's cores, until one matches) and compares the
weights tensor by tensor where the run's model.safetensors is there, else by digest; `restore` then writes the
retrained weights into a run committed without them, once their digest matches (the repository's rule: a run that
did not learn is committed without its weights).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mecheval.common import atomic_write_bytes
from mecheval.training.checkpoint import read_tensors, weights_digest
from mecheval.training.run_dir import MODEL, RunDir
from mecheval.training.threads import available_cores
from mecheval.training.trainer import train


@dataclass
class Reproduction:
    """The outcome of retraining `run`: `same` where the weights match bitwise (with `threads` threads)."""

    run: Path
    threads: int
    same: bool
    steps: int  # the steps the retrained run took (an early stop included)
    differing: list[str] = field(default_factory=list)  # the tensors that differ (compared tensor by tensor)
    max_abs_diff: float = 0.0  # the largest elementwise difference among them
    restored: bool = False  # the retrained weights written into the run (it had none)

    def words(self) -> str:
        if self.same:
            restored = f"; its weights restored: {self.run / MODEL}" if self.restored else ""
            return f"{self.run}: reproduced bitwise ({self.steps} steps, {self.threads} thread(s)){restored}"
        detail = (f"{len(self.differing)} tensor(s) differ, by up to {self.max_abs_diff:.3g} (first: {self.differing[0]})"
                  if self.differing else "the weights' digest differs")
        return f"{self.run}: NOT reproduced with {self.threads} thread(s): {detail}"


def reproduce(run_dir: str | Path, quiet: bool = True, restore: bool = False) -> Reproduction:
    """Retrains the finished run in `run_dir` (module docstring); its directory is only read, but with `restore`
    where it has no weights and the retrained ones match its digest (then written there). ValueError where the
    run is not finished or has neither weights nor a digest to compare with."""
    run = RunDir(run_dir)
    if not run.finished:
        raise ValueError(f"{run.path}: not a finished run (no summary.json); only a finished run can be reproduced")
    summary = run.read_summary()
    theirs = read_tensors(run / MODEL)[0] if (run / MODEL).exists() else None
    if theirs is None and "weights_sha256" not in summary:
        raise ValueError(f"{run.path}: neither {MODEL} nor a weights digest in summary.json: nothing to compare with")
    cfg = run.read_config()
    tried = [summary["threads"]] if "threads" in summary else list(dict.fromkeys([1, available_cores()]))
    before = torch.get_num_threads()
    try:
        for threads in tried:
            torch.set_num_threads(threads)
            with tempfile.TemporaryDirectory(prefix="mecheval-reproduce-") as scratch:
                steps = train(cfg, Path(scratch) / "run", quiet=quiet)["steps"]
                ours = read_tensors(Path(scratch) / "run" / MODEL)[0]
                outcome = _compare(run.path, threads, steps, ours, theirs, summary.get("weights_sha256"))
                if outcome.same and restore and theirs is None:
                    atomic_write_bytes(run / MODEL, (Path(scratch) / "run" / MODEL).read_bytes(), run.path)
                    outcome.restored = True
            if outcome.same:
                return outcome
        return outcome
    finally:
        torch.set_num_threads(before)


def _compare(run: Path, threads: int, steps: int, ours: dict, theirs: dict | None, digest: str | None) -> Reproduction:
    if theirs is None:
        return Reproduction(run, threads, weights_digest(ours) == digest, steps)
    differing = sorted(n for n in ours.keys() | theirs.keys()
                       if n not in ours or n not in theirs or not torch.equal(ours[n], theirs[n]))
    gap = max(((ours[n].float() - theirs[n].float()).abs().max().item() for n in differing
               if n in ours and n in theirs and ours[n].shape == theirs[n].shape), default=float("inf") if differing else 0.0)
    return Reproduction(run, threads, not differing, steps, differing, gap)
