"""A sweep's runs grouped into cohorts (`training.cohort`): runs that differ only in seed, learning rate (and its
schedule) and weight decay train as one job, each in the run directory its solo run would have.

`cohort` is a size K (at most K members each) or "auto": as many as fit in memory (`members_that_fit`), and on
local workers no more than spreads the runs over every worker (a cohort is one worker's job).
"""

from __future__ import annotations

import math
import os

import torch

from mecheval.sweeps.executors import CohortJob, Job
from mecheval.training.config import ConfigError, TrainConfig

AUTO = "auto"
ACTIVATION_FLOATS = 32  # floats kept for the backward per token, width and layer: a generous guess for the zoo


def parse_cohort(text: str | int | None) -> int | str | None:
    """`--cohort`: a size >= 1 or "auto"; None stays None (no cohorts). ConfigError otherwise."""
    if text is None or text == AUTO:
        return text
    try:
        size = int(text)
    except ValueError:
        size = 0
    if size < 1:
        raise ConfigError(f"cohort must be a size >= 1 or {AUTO!r}, got {text!r}")
    return size


def form_cohorts(jobs: list[Job], cohort: int | str, workers: int | None = None) -> list[Job | CohortJob]:
    """`jobs` grouped into cohorts of compatible runs (`training.cohort.cohort_key`), in the order of their first
    run; a run alone in its group stays a Job. `cohort`: at most this many members, or "auto" (see the module)."""
    from mecheval.training.cohort import cohort_key

    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        groups.setdefault(cohort_key(TrainConfig.model_validate(job.config)), []).append(job)
    out: list[Job | CohortJob] = []
    for group in groups.values():
        size = cohort if cohort != AUTO else auto_size(group, len(jobs), workers)
        for start in range(0, len(group), size):
            chunk = group[start:start + size]
            out.append(chunk[0] if len(chunk) == 1 else CohortJob(tuple(chunk)))
    return out


def describe_cohorts(jobs: list[Job | CohortJob]) -> str:
    """One line: how many cohorts of how many runs, and how many runs train alone (none compatible with them)."""
    from mecheval.training.cohort import COHORT_FIELDS

    sizes = [len(j.members) for j in jobs if isinstance(j, CohortJob)]
    alone = len(jobs) - len(sizes)
    if not sizes:
        return (f"cohorts: none ({alone} runs train alone: no two differ only in "
                f"{', '.join(COHORT_FIELDS)})")
    return (f"cohorts: {sum(sizes)} runs in {len(sizes)} cohorts of {min(sizes)}–{max(sizes)}"
            + (f"; {alone} runs alone" if alone else ""))


def auto_size(group: list[Job], total: int, workers: int | None) -> int:
    """The "auto" size for a group of compatible runs out of `total` runs: what fits in memory, and with `workers`
    local workers at most the group's share of them (ceil(group / its workers))."""
    size = members_that_fit(TrainConfig.model_validate(group[0].config))
    if workers:
        share = max(1, round(workers * len(group) / total))
        size = min(size, math.ceil(len(group) / share))
    return max(1, size)


def members_that_fit(cfg: TrainConfig) -> int:
    """How many members of `cfg` fit in half the free memory of its device (an estimate): per member its
    parameters four times (weights, gradients, AdamW's two moments) and its activations (batch × the task's
    length × d_model × layers × ACTIVATION_FLOATS), in float32."""
    from mecheval.models import build_model
    from mecheval.tasks import make_task
    from mecheval.training.trainer import resolve_device

    with torch.device("meta"):
        params = build_model(cfg.model).num_params()
    length = make_task(cfg.task.name, **cfg.task.params).sample(1, seed=0).tokens.shape[1]
    width, layers = getattr(cfg.model, "d_model", 64), getattr(cfg.model, "n_layers", 2)
    per_member = 4 * (4 * params + cfg.batch_size * length * width * layers * ACTIVATION_FLOATS)
    return max(1, int(free_memory(resolve_device(cfg.device)) / 2 // per_member))


def free_memory(device: torch.device) -> int:
    """Free bytes on `device`: the GPU's, or the machine's available memory."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
