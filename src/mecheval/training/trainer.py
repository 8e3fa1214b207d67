"""`train(config, run_dir)`: one training run, as published, reproducible and resumable.

AdamW (weight decay from the config, 0 as published), warmup then cosine, cross-entropy on the answer
token(s) only, the head computed only at `answer_pos`. Batch of step s depends only on (config, s);
the lr only on s; the checkpoint restores weights, AdamW moments, RNG and the running metric sums,
so a resumed run ends bitwise identical to an uninterrupted one (on CPU).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

import mecheval
from mecheval.models import LM, build_model
from mecheval.tasks import Batch, make_task
from mecheval.common import atomic_write_text, check_inside, safe_mkdir
from mecheval.errors import MechevalError
from mecheval.training.checkpoint import atomic_save_tensors, load_checkpoint, save_checkpoint, weights_digest
from mecheval.training.config import ConfigError, TrainConfig, config_diff
from mecheval.training.data import TrainStream, derive_seed, eval_sets
from mecheval.training.lock import DirLock
from mecheval.training.loggers import check_loggers, open_loggers
from mecheval.training.optimizer import adamw
from mecheval.training.run_dir import (
    CHECKPOINT, CONFIG, DIVERGED, METRICS, METRICS_ARCHIVE, MODEL, SUMMARY, WORKER, RunDir, snapshot_name,
)
from mecheval.training.schedule import lr_at


class RunExistsError(MechevalError, FileExistsError):
    """The run directory already holds a run (pass `resume=True` to continue it); the message names the
    Python arguments (`commands.flags` gives the CLI's)."""


class DivergedError(MechevalError, RuntimeError):
    """The loss or the weights became non-finite (NaN or inf); the message names the step."""


class TrainingInterrupted(Exception):
    """A stop was requested (Ctrl-C, SIGTERM, a sweep stopping): the run saved a checkpoint and stopped."""


STOP = threading.Event()  # set by SIGINT/SIGTERM while training (or by a sweep worker's parent dying)


def request_stop(*_) -> None:
    """Signal handler: the running `fit` checkpoints and stops after its current step."""
    STOP.set()


@contextlib.contextmanager
def stop_on_signals():
    """SIGINT and SIGTERM request a stop instead of killing the run mid-step (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def subnormals_flushed(device: torch.device):
    """On a CPU, subnormal floats (below 1.2e-38: a scan's state decaying towards zero) flushed to zero while the
    block runs, then off again (torch's default). x86 CPUs compute them on a slow path (a Mamba run at d = 128
    trained 4.6x slower in them); the setting is the thread's processor state, so it must not outlive training."""
    flushed = device.type == "cpu" and torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if flushed:
            torch.set_flush_denormal(False)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but torch sees no CUDA device")
    return torch.device(name)


def autocast(amp: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA where `amp`, else nothing."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if amp else contextlib.nullcontext()


def answer_logits(lm: LM, batch: Batch, amp: bool) -> torch.Tensor:
    """Logits at the answer positions only: [B, V] (or [B, Q, V]), in float32."""
    with autocast(amp):
        logits = lm(batch.tokens, positions=batch.answer_pos)
    return logits.float()


def backward(lm: LM, batch: Batch, groups: int, amp: bool, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Accumulates into the parameters' .grad the gradient of the batch's mean answer cross-entropy,
    computed over at most `groups` length groups, each at its own length (`Batch.by_length`): the
    gradient of the padded batch, for the cost of its tokens. Returns (mean loss, correct answers), detached.
    The groups are found where `batch` is (on the CPU: no wait for a GPU), then each goes to `device`
    (default: the batch's)."""
    device = device or batch.tokens.device
    n = batch.answer.numel()
    total, correct = torch.zeros((), device=device), torch.zeros((), dtype=torch.long, device=device)
    for _, group in batch.by_length(groups):
        group = group.to_device(device)
        logits = answer_logits(lm, group, amp)
        loss = F.cross_entropy(logits.flatten(0, -2), group.answer.flatten(), reduction="sum") / n
        loss.backward()
        total += loss.detach()
        correct += (logits.detach().argmax(-1) == group.answer).sum()
    return total, correct


@torch.no_grad()
def evaluate(lm: LM, batch: Batch, chunk: int, amp: bool, groups: int = 1) -> dict[str, float]:
    """Accuracy (argmax at answer_pos) and mean answer cross-entropy over `batch`, computed in chunks of
    `chunk` examples within each of `groups` length groups."""
    lm.eval()
    loss, correct = torch.zeros((), device=batch.tokens.device), torch.zeros((), dtype=torch.long, device=batch.tokens.device)
    for _, group in batch.by_length(groups):
        for start in range(0, len(group), chunk):
            part = group.select(slice(start, start + chunk)).trimmed()
            logits = answer_logits(lm, part, amp)
            loss += F.cross_entropy(logits.flatten(0, -2), part.answer.flatten(), reduction="sum")
            correct += (logits.argmax(-1) == part.answer).sum()
    lm.train()
    n = batch.answer.numel()
    return {"acc": correct.item() / n, "loss": loss.item() / n}


def versions() -> dict[str, str]:
    return {"mecheval": mecheval.__version__, "torch": torch.__version__, "python": platform.python_version()}


def _check_same_run(run: RunDir, cfg: TrainConfig) -> None:
    diff = config_diff(run.read_config(), cfg)
    if diff:
        raise ConfigError(f"{run.path} holds a run with a different config:\n  " + "\n  ".join(diff))


def _check_no_foreign_files(run: RunDir) -> None:
    """A directory without config.yaml must not hold files a run would write (they are not ours)."""
    found = [n for n in (METRICS, METRICS_ARCHIVE, MODEL, CHECKPOINT, SUMMARY) if (run / n).exists()]
    if found:
        raise RunExistsError(f"{run.path} holds {', '.join(found)} but no {CONFIG}: not a mecheval run; choose another `run_dir`")


def train(cfg: TrainConfig, run_dir: str | Path, resume: bool = False, quiet: bool = False) -> dict:
    """Trains (or resumes) the run in `run_dir` and returns its summary.

    A finished run (summary.json present) is not retrained: with resume its summary is returned.
    The run directory is locked while training; a fresh run writes nothing until its loggers' packages are
    found and its model, task and evaluation sets are built, and a failure before that leaves no trace.
    Raises TrainingInterrupted after a requested stop (a checkpoint is saved first).
    """
    with opened_run(cfg, run_dir, resume, quiet) as opened:
        return opened if isinstance(opened, dict) else opened.fit()


@contextlib.contextmanager
def opened_run(cfg: TrainConfig, run_dir: str | Path, resume: bool, quiet: bool) -> Iterator["Trainer | dict"]:
    """The run in `run_dir`, locked for the block: its Trainer ready to train (config and worker.json written),
    or the summary of a finished run (with `resume`). The checks and refusals of `train`."""
    run = RunDir(run_dir)
    resolve_device(cfg.device)  # fail before anything is written
    check_loggers(cfg.loggers.model_dump())
    if run.path.exists() and not run.path.is_dir():
        raise RunExistsError(f"{run.path} is a file, not a run directory")
    if not run.started:
        _check_no_foreign_files(run)  # before the lock file goes in: a directory not ours stays untouched
    created = not run.path.exists()
    with DirLock(run.path, "run directory"):
        if run.started:
            if not resume:
                raise RunExistsError(f"{run.path} already holds a run; resume it (`resume=True`) or choose another `run_dir`")
            _check_same_run(run, cfg)
            if run.diverged:  # its seed would diverge again: the record is its result
                raise DivergedError(f"{run.path}: {run.read_divergence()['reason']}, recorded in {DIVERGED}; not "
                                    f"trained again (delete the run directory to train it afresh)")
            if run.finished:
                (run / CHECKPOINT).unlink(missing_ok=True)
                yield run.read_summary()
                return
            trainer = Trainer(cfg, run, quiet)
        else:
            try:
                trainer = Trainer(cfg, run, quiet)
            except BaseException:
                if created:
                    shutil.rmtree(run.path, ignore_errors=True)
                raise
            run.write_config(cfg)
        atomic_write_text(run / WORKER, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}), run.path)
        yield trainer


class Stopwatch:
    """Wall and CPU seconds (this process, all threads) since the last `lap`."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        laps = wall - self.wall, cpu - self.cpu
        self.wall, self.cpu = wall, cpu
        return laps


class Trainer:
    """The state of one run in memory; `fit()` trains from the latest checkpoint to `cfg.steps`."""

    def __init__(self, cfg: TrainConfig, run: RunDir, quiet: bool) -> None:
        self.cfg, self.run, self.quiet = cfg, run, quiet
        self.device = resolve_device(cfg.device)
        self.amp = cfg.bf16 and self.device.type == "cuda"
        self.task = make_task(cfg.task.name, **cfg.task.params)
        torch.manual_seed(derive_seed(cfg.seed, "init"))
        self.lm = build_model(cfg.model).to(self.device)
        self.opt = adamw(self.lm.parameters(), cfg.optim, self.device)
        self.stream = TrainStream(self.task, cfg.batch_size, cfg.seed, cfg.train_size, cfg.train_order)
        self.evals = {k: v.to(self.device) for k, v in eval_sets(self.task, cfg.eval.splits, cfg.eval.size, cfg.eval.seed).items()}
        self.step, self.wall_s, self.tokens = 0, 0.0, 0
        self.cpu_s: float | None = 0.0  # this process's CPU seconds (all threads) spent training; None: not known
        self.accum = self._zero_accum()
        self.bad_step = torch.zeros((), dtype=torch.long, device=self.device)  # the first non-finite loss's (0: none)
        for stale in [*run.path.glob(".*.tmp-*"), *run.path.glob("snapshots/.*.tmp-*")]:  # writes cut short by a kill
            stale.unlink()
        if (run / CHECKPOINT).exists():
            accum, state = load_checkpoint(run / CHECKPOINT, self.lm, self.opt, cfg.fingerprint())
            self.accum = {k: v.to(self.device) for k, v in accum.items()}
            self.step, self.wall_s, self.tokens = state["step"], state["wall_s"], state["tokens"]
            self.cpu_s = state.get("cpu_s")  # None from a checkpoint written before it was recorded
        run.truncate_metrics(self.step)
        self.snapshot_at = set(cfg.snapshots.schedule(cfg.steps)) if cfg.snapshots else set()
        self.evals_seen = [m["eval"] for m in run.read_metrics() if "eval" in m]  # for the early stop

    def _zero_accum(self) -> dict[str, torch.Tensor]:
        """Running sums since the last log: answer loss (per step), correct answers, answers, steps."""
        z = lambda dtype: torch.zeros((), dtype=dtype, device=self.device)  # noqa: E731
        return {"loss": z(torch.float32), "correct": z(torch.long), "count": z(torch.long), "steps": z(torch.long)}

    def train_step(self, batch: Batch) -> None:
        lr = lr_at(self.step, self.cfg.steps, self.cfg.optim)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        loss, correct = backward(self.lm, batch, self.cfg.length_groups, self.amp, self.device)
        self.opt.step()
        self.step += 1
        self.bad_step = torch.where((self.bad_step == 0) & ~torch.isfinite(loss), self.step, self.bad_step)  # no sync
        a = self.accum
        a["loss"] += loss
        a["correct"] += correct
        a["count"] += batch.answer.numel()
        a["steps"] += 1

    def next_batch(self) -> Batch:
        """The batch of the current step (its tokens counted)."""
        batch = self.stream.batch(self.step)
        self.tokens += int(batch.lengths.sum())
        return batch

    def add_time(self, wall_s: float, cpu_s: float) -> None:
        """Adds the seconds spent on this run (wall, CPU) to its totals."""
        self.wall_s += wall_s
        self.cpu_s = None if self.cpu_s is None else self.cpu_s + cpu_s

    @property
    def done(self) -> bool:
        return self.step >= self.cfg.steps or self.stopped_early()

    def due(self, every: int) -> bool:
        return self.step % every == 0 or self.step == self.cfg.steps

    def check_finite(self) -> None:
        """DivergedError where a loss so far or a weight now is not finite (checked before anything is logged
        or saved, so that no checkpoint or final weights hold NaN)."""
        if int(self.bad_step):
            self.diverge(int(self.bad_step), "the training loss is not finite")
        if not all(bool(torch.isfinite(p).all()) for p in self.lm.parameters()):
            self.diverge(self.step, "weights are not finite")

    def diverge(self, step: int, what: str) -> None:
        """Records the divergence in the run directory (diverged.json: a result, not trained again) and raises
        DivergedError."""
        reason = f"{what} at step {step} (optim.lr {self.cfg.optim.lr:g})"
        self.run.write_divergence(step, reason, self.cfg.optim.lr, {"wall_time_s": self.wall_s, "cpu_time_s": self.cpu_s,
                                                                    "fingerprint": self.cfg.fingerprint()})
        raise DivergedError(f"{self.run.path}: {reason}; nothing of that step was saved")

    def record(self, tokens_per_s: float) -> dict:
        """The metrics line of the current step (with evaluation when the eval cadence says so)."""
        self.check_finite()
        a = self.accum
        rec = {
            "step": self.step,
            "lr": lr_at(self.step - 1, self.cfg.steps, self.cfg.optim),
            "loss": (a["loss"] / a["steps"]).item(),
            "acc": (a["correct"] / a["count"]).item(),
            "tokens": self.tokens,
        }
        if self.due(self.cfg.eval.every):
            rec["eval"] = {split: evaluate(self.lm, b, self.cfg.eval.batch_size, self.amp, self.cfg.length_groups) for split, b in self.evals.items()}
        rec["time"] = {"wall_s": self.wall_s, "tokens_per_s": tokens_per_s}
        for total in self.accum.values():  # in place: a cohort's stacked sums stay shared
            total.zero_()
        return rec

    def stopped_early(self) -> bool:
        """The opt-in early stop: the last `patience` evaluations all reached `acc` on `split`."""
        rule = self.cfg.early_stop
        if rule is None:
            return False
        evals = self.evals_seen[-rule.patience:]
        return len(evals) == rule.patience and all(e[rule.split]["acc"] >= rule.acc for e in evals)

    def snapshot(self) -> None:
        """The weights now, if this step is in the snapshot schedule (rewritten identically on a resume)."""
        if self.step in self.snapshot_at:
            self.check_finite()
            path = self.run / snapshot_name(self.step)
            safe_mkdir(path.parent, self.run.path)
            atomic_save_tensors(path, self.lm.state_dict(), {"fingerprint": self.cfg.fingerprint(), "step": str(self.step)},
                                self.run.path)

    def checkpoint(self) -> None:
        self.check_finite()
        state = {"step": self.step, "wall_s": self.wall_s, "cpu_s": self.cpu_s, "tokens": self.tokens, "fingerprint": self.cfg.fingerprint(),
                 "data": self.stream.state()}
        save_checkpoint(self.run / CHECKPOINT, self.lm, self.opt, self.accum, state)

    @contextlib.contextmanager
    def logging(self) -> Iterator[None]:
        """For the block: metrics.jsonl open for appending and the experiment loggers open (`after_step` writes
        to both); the step-0 snapshot taken."""
        loggers = open_loggers(self.cfg.model_dump(mode="json"), self.run.path)
        try:
            with open(check_inside(self.run / METRICS, self.run.path), "a") as metrics:
                self._log = metrics, loggers, self.tokens, self.wall_s  # tokens/s are this session's
                if self.step == 0:
                    self.snapshot()
                yield
        finally:
            for logger in loggers:
                logger.close()

    def after_step(self) -> dict | None:
        """Inside `logging`: the snapshot, metrics record (with evaluation) and checkpoint that fall on this
        step; returns the record written, if any."""
        cfg = self.cfg
        self.snapshot()
        rec = None
        if self.due(cfg.log_every) or self.due(cfg.eval.every):
            metrics, loggers, tokens_start, wall_start = self._log
            rec = self.record((self.tokens - tokens_start) / max(self.wall_s - wall_start, 1e-9))
            metrics.write(json.dumps(rec) + "\n")
            metrics.flush()
            if "eval" in rec:
                self.evals_seen.append(rec["eval"])
            for logger in loggers:
                logger.log(rec)
        if self.due(cfg.checkpoint_every):
            self.checkpoint()
        return rec

    def fit(self) -> dict:
        bar = tqdm(total=self.cfg.steps, initial=self.step, desc=self.run.path.name, disable=self.quiet, dynamic_ncols=True)
        try:
            with stop_on_signals(), subnormals_flushed(self.device), self.logging():
                clock = Stopwatch()
                while not self.done:
                    if STOP.is_set():
                        self.checkpoint()
                        raise TrainingInterrupted(f"{self.run.path}: stopped at step {self.step} (checkpoint saved)")
                    self.train_step(self.next_batch())
                    self.add_time(*clock.lap())
                    bar.update(1)
                    if (rec := self.after_step()) is not None:
                        bar.set_postfix(loss=f"{rec['loss']:.3f}", acc=f"{rec['acc']:.3f}", tok_s=f"{rec['time']['tokens_per_s']:.0f}")
        finally:
            bar.close()
        return self.finish()

    def release(self) -> None:
        """Drops the model, optimiser and data of a finished run, for the memory (a cohort's next member's)."""
        self.lm = self.opt = self.stream = self.evals = None

    def finish(self) -> dict:
        """Writes the final weights and summary.json (the mark of a finished run), drops the checkpoint."""
        self.check_finite()
        last = self.run.read_metrics()[-1]
        if self.snapshot_at and self.step not in self.snapshot_at:  # an early stop: keep where it ended
            self.snapshot_at.add(self.step)
            self.snapshot()
        atomic_save_tensors(self.run / MODEL, self.lm.state_dict(), {"fingerprint": self.cfg.fingerprint()}, self.run.path)
        summary = {
            "steps": self.step,
            "stopped_early": self.step < self.cfg.steps,
            "final": last["eval"],
            "train_loss": last["loss"],
            "train_acc": last["acc"],
            "tokens": self.tokens,
            "wall_time_s": self.wall_s,
            "cpu_time_s": self.cpu_s,  # core-seconds: what the run cost on a shared machine, where wall time overstates it
            "steps_per_s": self.step / max(self.wall_s, 1e-9),
            "tokens_per_s": self.tokens / max(self.wall_s, 1e-9),
            "n_params": self.lm.num_params(),
            "device": str(self.device),
            "amp": "bf16" if self.amp else None,
            "fingerprint": self.cfg.fingerprint(),
            "threads": torch.get_num_threads(),  # with the digest: what `reproduce` retrains with and checks against
            "weights_sha256": weights_digest(self.lm.state_dict()),
            "versions": versions(),
        }
        self.run.write_summary(summary)
        (self.run / CHECKPOINT).unlink(missing_ok=True)
        return summary
