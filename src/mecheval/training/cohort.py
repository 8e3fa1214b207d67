"""`train_cohort(members)`: K runs that differ only in seed, learning rate (and its schedule) and weight decay,
trained as one job.

Each member is an ordinary run: `train`'s run directory (config, metrics, checkpoint, snapshots, weights, summary),
opened, locked and checked as `train` opens it; a member's checkpoint resumes it in any cohort or alone. Engines:
    loop   each member takes its own step, one after another (the solo run's kernels and optimiser): bitwise
           its solo run. The only engine for ops that cannot be vmapped (the numba CPU kernels).
    vmap   one step for all: the parameters stacked on a leading member axis (`stack_module_state`), the forward
           `vmap`ped over `functional_call` on the pure-PyTorch kernels (`kernel_mode("reference")`), the loss
           summed over members (so each member's gradient is its solo gradient), one `StackedAdamW` with each
           member's learning rate and weight decay. The solo run up to float rounding.
    auto   vmap on a GPU, loop on a CPU (where stacking does not pay: docs/speed.md).
The vmap engine steps the unfinished members at the lowest step (members resumed at different steps catch up
first), the loop engine one member after another; a member whose early stop fires is finished at once (weights,
summary) and frozen; one whose loss or weights turn non-finite fails alone (its DivergedError is its result).
The loop engine frees a finished member's model, optimiser and data: the next member's steps reuse that memory
(otherwise glibc hands the freed top of its heap back to the OS and faults it in again every step: 1,600 page
faults a step, 12% of its CPU time, for attention at d = 64 in a cohort of 64; 30 with it).
Each step's wall and CPU time is split evenly among the members that took it; a member's logging, evaluation and
checkpoints are its own time, but for those after its last step and its finishing, which a solo run's time leaves
out too: a member records the time its solo run would.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap
from tqdm import tqdm

from mecheval.common import flatten
from mecheval.models import build_model
from mecheval.models.ops.dispatch import kernel_mode
from mecheval.tasks import Batch, make_task
from mecheval.training.config import ConfigError, TrainConfig
from mecheval.training.schedule import lr_at
from mecheval.training.stacked_adamw import StackedAdamW
from mecheval.training.trainer import (
    STOP, DivergedError, Stopwatch, Trainer, TrainingInterrupted, autocast, opened_run, resolve_device,
    stop_on_signals, subnormals_flushed,
)

COHORT_FIELDS = ("seed", "optim.lr", "optim.weight_decay", "optim.warmup", "optim.schedule")  # members may differ in these
ENGINES = ("auto", "loop", "vmap")


class CohortError(ConfigError):
    """Runs that cannot train as one cohort: configs that differ beyond COHORT_FIELDS, or a model the vmap engine
    cannot run."""


def cohort_key(cfg: TrainConfig) -> tuple:
    """What the members of one cohort share: the config's fields but COHORT_FIELDS, (dotted name, value) sorted."""
    return tuple(sorted((k, v) for k, v in flatten(cfg.model_dump(mode="json")).items() if k not in COHORT_FIELDS))


def check_cohort(configs: Sequence[TrainConfig]) -> None:
    """CohortError naming the fields where a config differs from the first beyond COHORT_FIELDS."""
    first = dict(cohort_key(configs[0]))
    for i, cfg in enumerate(configs[1:], 1):
        other = dict(cohort_key(cfg))
        diff = [f"{k}: {first.get(k, '(absent)')!r} vs {other.get(k, '(absent)')!r}"
                for k in sorted(set(first) | set(other)) if first.get(k) != other.get(k)]
        if diff:
            raise CohortError(f"members 0 and {i} cannot train as one cohort (they may differ only in "
                              f"{', '.join(COHORT_FIELDS)}): " + "; ".join(diff))


def train_cohort(members: Sequence[tuple[TrainConfig, str | Path]], engine: str = "auto", resume: bool = False,
                 quiet: bool = False) -> list[dict | Exception]:
    """Trains (or resumes) each member, a (config, run directory), as `train` would, all in one job; returns per
    member its summary or the exception that ended it (one that `train` would raise on opening it, DivergedError).

    Raises CohortError for members that differ beyond COHORT_FIELDS (or engine "vmap" for a model whose ops cannot
    be vmapped), TrainingInterrupted after a requested stop (every running member's checkpoint saved first).
    """
    if not members:
        return []
    check_cohort([cfg for cfg, _ in members])
    engine = resolve_engine(engine, members[0][0])
    results: list[dict | Exception | None] = [None] * len(members)
    with contextlib.ExitStack() as opened:
        trainers: dict[int, Trainer] = {}
        for i, (cfg, run_dir) in enumerate(members):
            try:
                run = opened.enter_context(opened_run(cfg, run_dir, resume, quiet=True))
            except Exception as e:  # this member fails alone, as its solo run would
                results[i] = e
                continue
            if isinstance(run, dict):
                results[i] = run
            else:
                trainers[i] = run
        if trainers:
            results_of = Cohort(list(trainers.values()), engine, quiet).fit()
            for i, result in zip(trainers, results_of):
                results[i] = result
    return results


def resolve_engine(engine: str, cfg: TrainConfig) -> str:
    """"loop" or "vmap" for members of config `cfg`: "auto" is vmap on a GPU where the model's ops can be
    vmapped (else loop, said on stderr), loop on a CPU. CohortError for an unknown engine, or for "vmap" where
    the ops cannot be vmapped (found on throwaway models, before any run is opened)."""
    if engine not in ENGINES:
        raise CohortError(f"unknown cohort engine {engine!r}; known: {', '.join(ENGINES)}")
    if engine == "loop" or (engine == "auto" and resolve_device(cfg.device).type != "cuda"):
        return "loop"
    problem = vmap_problem(cfg)
    if problem is None:
        return "vmap"
    model = getattr(cfg.model, "mixer", None) or getattr(cfg.model, "hf", "")
    message = f"model {model}: its ops cannot run under torch.func.vmap ({problem})"
    if engine == "vmap":
        raise CohortError(f"{message}; train it with the cohort engine 'loop'")
    print(f"note: {message}; its members train one after another (engine 'loop')", file=sys.stderr)
    return "loop"


def vmap_problem(cfg: TrainConfig) -> str | None:
    """Why two models of `cfg` cannot take a vmapped forward and backward (`stacked_losses`, one example each),
    in one line; None where they can. Throwaway models and data; the global RNG is left as it was."""
    device = resolve_device(cfg.device)
    batch = make_task(cfg.task.name, **cfg.task.params).sample(1, seed=0)
    with torch.random.fork_rng(devices=[]):
        lms = [build_model(cfg.model).to(device) for _ in range(2)]
    params, buffers = stack_module_state(lms)
    try:
        loss, _ = stacked_losses(lms[0], params, buffers, [batch, batch], amp=False)
        loss.sum().backward()
    except Exception as e:  # whatever the ops raise is the answer
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return f"{type(e).__name__}: {first}"
    return None


class Cohort:
    """Trainers of one cohort (opened, locked), stepped together by engine "loop" or "vmap"; `fit()` trains them
    to the end."""

    def __init__(self, members: list[Trainer], engine: str, quiet: bool) -> None:
        self.members, self.engine, self.quiet = members, engine, quiet
        self.device = members[0].device
        self.stacked = StackedStep(members) if engine == "vmap" else None

    def fit(self) -> list[dict | Exception]:
        """Trains every member to its end; per member its summary or its DivergedError."""
        members, results = self.members, {}
        bar = tqdm(total=sum(m.cfg.steps for m in members), initial=sum(m.step for m in members), disable=self.quiet,
                   desc=f"cohort of {len(members)} ({self.engine})", dynamic_ncols=True)
        try:
            with stop_on_signals(), subnormals_flushed(self.device), contextlib.ExitStack() as logs:
                for m in members:
                    logs.enter_context(m.logging())
                clock = Stopwatch()
                running = self._finish_done(results, range(len(members)))
                while running:
                    clock.lap()  # finishing members: after their last step, which a solo run's time ends with
                    if STOP.is_set():
                        for k in running:
                            members[k].checkpoint()
                        raise TrainingInterrupted(f"cohort of {len(members)} ({members[0].run.path.parent}): stopped, "
                                                  f"{len(running)} unfinished runs' checkpoints saved")
                    rows = self._stepping(running)
                    self._step(rows, [members[k].next_batch() for k in rows])
                    wall, cpu = clock.lap()
                    for k in rows:
                        members[k].add_time(wall / len(rows), cpu / len(rows))
                        try:
                            members[k].after_step()
                        except DivergedError as e:  # this member fails alone; the others go on
                            results[k] = e
                        wall, cpu = clock.lap()  # its logging, evaluation and checkpoint: its own, as alone
                        if not members[k].done:
                            members[k].add_time(wall, cpu)
                    bar.update(len(rows))
                    ended = set(rows) - set(self._finish_done(results, rows))  # only the members that stepped change
                    running = [k for k in running if k not in ended]
        finally:
            bar.close()
        return [results[k] for k in range(len(members))]

    def _finish_done(self, results: dict[int, dict | Exception], rows) -> list[int]:
        """Finishes the members at `rows` that are done (weights, summary: into `results`); returns those of `rows`
        still training."""
        running = []
        for k in rows:
            m = self.members[k]
            if k in results:
                continue
            if not m.done:
                running.append(k)
                continue
            try:
                results[k] = m.finish()
            except DivergedError as e:
                results[k] = e
            if self.stacked is None:  # the loop engine's next member reuses its memory instead of faulting in new pages
                m.release()
        return running

    def _stepping(self, running: list[int]) -> list[int]:
        """The rows that take the next step: with vmap every member at the lowest step (members behind catch up
        first); with loop the first unfinished member alone, to its end (one run after another, each with the
        caches of a solo run: in lockstep, 16 attention runs at d = 64 trained at 0.56 of a solo run's rate)."""
        if self.stacked is None:
            return running[:1]
        low = min(self.members[k].step for k in running)
        return [k for k in running if self.members[k].step == low]

    def _step(self, rows: list[int], batches: list[Batch]) -> None:
        """One training step of the members at `rows` on their `batches`."""
        if self.stacked is None:
            for k, batch in zip(rows, batches):
                self.members[k].train_step(batch)
        else:
            self.stacked.step(rows, batches)


class StackedStep:
    """The vmap engine: the members' parameters as leaves [K, ...] that their models' parameters are views of, one
    vmapped forward and backward for the members that step, one `StackedAdamW` update. The members' optimisers
    and running sums become views of the stacked ones, so that each member logs and checkpoints as it would alone.
    """

    def __init__(self, members: list[Trainer]) -> None:
        cfg = members[0].cfg
        self.members, self.amp, self.device = members, members[0].amp, members[0].device
        self.base = members[0].lm  # the module structure `functional_call` runs with the stacked parameters
        self.params, self.buffers = stack_module_state([m.lm for m in members])  # copies; the models' become views
        self.opt = StackedAdamW(list(self.params.values()), cfg.optim.betas, cfg.optim.eps)
        self.weight_decay = torch.tensor([m.cfg.optim.weight_decay for m in members], dtype=torch.float64, device=self.device)
        self.accum = {k: torch.stack([m.accum[k] for m in members]) for k in members[0].accum}
        self.bad_step = torch.stack([m.bad_step for m in members])
        for k, m in enumerate(members):
            self.opt.load_row(k, m.opt.state_dict()["state"])
            for name, p in m.lm.named_parameters():
                p.data = self.params[name].detach()[k]
            m.opt = _Row(self.opt, k)
            m.accum = {name: total[k] for name, total in self.accum.items()}
            m.bad_step = self.bad_step[k]

    def step(self, rows: list[int], batches: list[Batch]) -> None:
        """One training step of the members at `rows` on their `batches`; the other members stay as they are."""
        every = len(rows) == len(self.members)
        index = torch.tensor(rows, device=self.device)
        pick = (lambda d: d) if every else (lambda d: {k: v.index_select(0, index) for k, v in d.items()})  # noqa: E731
        for p in self.params.values():
            p.grad = None
        loss, correct = stacked_losses(self.base, pick(self.params), pick(self.buffers), batches, self.amp)
        loss.sum().backward()  # summed, never averaged: each member's gradient is its own loss's
        stepping = [self.members[k] for k in rows]
        lr = torch.tensor([lr_at(m.step, m.cfg.steps, m.cfg.optim) for m in stepping], dtype=torch.float64, device=self.device)
        self.opt.step(lr, self.weight_decay[index], None if every else index)
        for m in stepping:
            m.step += 1
        after = torch.tensor([m.step for m in stepping], device=self.device)
        bad = self.bad_step[index]
        self.bad_step.index_copy_(0, index, torch.where((bad == 0) & ~torch.isfinite(loss), after, bad))  # no sync
        a = self.accum
        a["loss"].index_add_(0, index, loss.detach())
        a["correct"].index_add_(0, index, correct)
        a["count"].index_add_(0, index, torch.tensor([b.answer.numel() for b in batches], device=self.device))
        a["steps"].index_add_(0, index, torch.ones_like(index))


class _Row:
    """Row k of a StackedAdamW, where a member's Trainer keeps its optimiser: what its checkpoints save."""

    def __init__(self, opt: StackedAdamW, k: int) -> None:
        self.opt, self.k = opt, k

    def state_dict(self) -> dict:
        return {"state": self.opt.state_of(self.k), "param_groups": []}


def stacked_losses(base: torch.nn.Module, params: dict, buffers: dict, batches: list[Batch],
                   amp: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Member k's mean answer cross-entropy [k] and correct answers [k] on batches[k], with its parameters and
    buffers (row k of each [k, ...] tensor) in `base`'s module structure: one vmapped forward, on the pure-PyTorch
    kernels (numba's cannot be vmapped)."""
    tokens, answer_pos, answer = _stacked(batches, next(iter(params.values())).device)
    n = answer[0].numel()

    def member(params, buffers, tokens, answer_pos, answer):
        with autocast(amp):
            logits = functional_call(base, (params, buffers), (tokens,), {"positions": answer_pos})
        logits = logits.float()
        loss = F.cross_entropy(logits.flatten(0, -2), answer.flatten(), reduction="sum") / n
        return loss, (logits.argmax(-1) == answer).sum()

    with kernel_mode("reference"), warnings.catch_warnings():
        # torch has no batching rule for CPU attention yet and loops over the members (said, once, per process)
        warnings.filterwarnings("ignore", "There is a performance drop because we have not yet implemented the batching rule")
        return vmap(member)(params, buffers, tokens, answer_pos, answer)


def _stacked(batches: list[Batch], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """tokens [k, B, T] (each batch cut to its longest sequence, then right-padded to the longest of all: every
    mixer is causal, so the logits at the answers are the same), answer_pos and answer [k, B] (or [k, B, Q]),
    on `device`."""
    batches = [b.trimmed() for b in batches]
    T = max(b.tokens.shape[1] for b in batches)
    tokens = torch.stack([F.pad(b.tokens, (0, T - b.tokens.shape[1])) for b in batches])
    out = (tokens, torch.stack([b.answer_pos for b in batches]), torch.stack([b.answer for b in batches]))
    if device.type == "cuda":
        return tuple(t.pin_memory().to(device, non_blocking=True) for t in out)
    return out
