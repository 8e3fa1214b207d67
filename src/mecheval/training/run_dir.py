"""A run directory and its files; `load_run(RUN_DIR) -> (lm, task, config)`.

    config.yaml              the full resolved TrainConfig
    metrics.jsonl            one JSON object per logged step (loss, lr, accuracy, eval per split, time)
    metrics.jsonl.gz         the same log of a finished run, gzip-compressed for committing (`archive_metrics`,
                             `mecheval archive-logs`; a quarter of the size); read like metrics.jsonl
    checkpoint.safetensors   training state while the run is unfinished (removed once it finishes)
    model.safetensors        final weights
    summary.json             final accuracy per split, steps, wall time, tokens/s, versions (last file)
    diverged.json            in place of summary.json, a run whose loss or weights turned non-finite: the step, why,
                             the learning rate, its last evaluation and its cost so far (a result: not trained again)
    snapshots/step-*.safetensors   weights at the `snapshots` steps (when configured; weights only)
    worker.json              pid and host of the process training the run (informational)
    .lock                    held by the process training the run (see mecheval.training.lock)
    error.log                tracebacks of failed attempts (a sweep's runs)
    run.json                 the run's architecture, variant and comparison group, recorded by the sweep that made it
                             (`mecheval.store.identity`; absent for runs made otherwise, or before it existed)
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import torch

from mecheval.common import NUMBER, atomic_write_bytes, atomic_write_text, read_json_object
from mecheval.training.checkpoint import CheckpointError, check_header, load_weights, read_metadata, read_tensors
from mecheval.plugins import is_import_path
from mecheval.training.config import ConfigError, TrainConfig, as_trained, dump_config, read_yaml, validate_config

CONFIG, METRICS, CHECKPOINT, MODEL, SUMMARY, WORKER, DIVERGED = (
    "config.yaml", "metrics.jsonl", "checkpoint.safetensors", "model.safetensors", "summary.json", "worker.json",
    "diverged.json",
)
METRICS_ARCHIVE = METRICS + ".gz"
SNAPSHOTS = "snapshots"


def snapshot_name(step: int) -> str:
    return f"{SNAPSHOTS}/step-{step:07d}.safetensors"


def snapshot_steps(run_dir: str | Path) -> list[int]:
    """The steps whose snapshot a run directory holds, sorted."""
    return sorted(int(p.stem.removeprefix("step-")) for p in (Path(run_dir) / SNAPSHOTS).glob("step-*.safetensors"))


class RunDir:
    """Paths and small readers/writers of one run directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    @property
    def finished(self) -> bool:
        return (self.path / SUMMARY).exists()

    @property
    def diverged(self) -> bool:
        return (self.path / DIVERGED).exists()

    @property
    def ended(self) -> bool:
        """Finished, or ended by diverging: nothing more to train."""
        return self.finished or self.diverged

    @property
    def has_weights(self) -> bool:
        """Are its final weights here? (A committed run that did not learn keeps only their digest.)"""
        return (self.path / MODEL).exists()

    @property
    def started(self) -> bool:
        return (self.path / CONFIG).exists()

    def _read_config_yaml(self) -> dict:
        path = self.path / CONFIG
        if not path.exists():
            raise FileNotFoundError(f"{self.path}: not a run directory (no {CONFIG})")
        return as_trained(read_yaml(path))

    def read_config(self) -> TrainConfig:
        """The validated config (a plug-in it names is imported: see `mecheval.plugins`)."""
        return validate_config(self._read_config_yaml(), source=str(self.path / CONFIG))

    def read_config_data(self) -> dict:
        """config.yaml as plain data, importing nothing: validated (every field) where it names only the zoo,
        as written where it names a plug-in (whose code reading results never runs)."""
        data = self._read_config_yaml()
        model, task = data.get("model") or {}, data.get("task") or {}
        mixers = model.get("mixer", []) if isinstance(model, dict) else []
        names = [*(mixers if isinstance(mixers, list) else [mixers]), task.get("name", "") if isinstance(task, dict) else "",
                 model.get("hf", "") if isinstance(model, dict) else ""]
        if any(isinstance(n, str) and is_import_path(n) for n in names):
            return data
        return validate_config(data, source=str(self.path / CONFIG)).model_dump(mode="json")

    def write_config(self, cfg: TrainConfig) -> None:
        atomic_write_text(self.path / CONFIG, dump_config(cfg), self.path)

    def read_summary(self) -> dict:
        """summary.json, checked (`final`: per split, its numbers); ConfigError naming the file otherwise."""
        path = self.path / SUMMARY
        summary = read_json_object(path, {}, optional={"final": dict, "steps": int, "fingerprint": str, "threads": int,
                                                  "weights_sha256": str})
        for split, scores in summary.get("final", {}).items():
            bad = [k for k, v in scores.items() if not isinstance(v, NUMBER) or isinstance(v, bool)] \
                if isinstance(scores, dict) else [split]
            if bad:
                raise ConfigError(f"{path}: field 'final.{split}' holds {scores!r}, expected numbers (acc, loss)")
        return summary

    def write_summary(self, summary: dict) -> None:
        atomic_write_text(self.path / SUMMARY, json.dumps(summary, indent=2) + "\n", self.path)

    def read_divergence(self) -> dict:
        """diverged.json, checked (`step`, `reason`, `lr`; `last_eval`: the last evaluation before it, per split its
        numbers; its cost so far, `wall_time_s`, `cpu_time_s`; the config's `fingerprint`, as a summary records it,
        since 2026-12-06); ConfigError naming the file otherwise."""
        return read_json_object(self.path / DIVERGED, {"step": int, "reason": str, "lr": NUMBER},
                                optional={"last_eval": dict})

    def write_divergence(self, step: int, reason: str, lr: float, cost: dict) -> None:
        """Records that the run diverged at `step` (diverged.json), with its last logged evaluation and `cost` (its
        `wall_time_s` and `cpu_time_s` until then and the config's `fingerprint`, as a summary states them)."""
        last = next((r["eval"] for r in reversed(self.read_metrics()) if isinstance(r.get("eval"), dict)), None)
        record = {"step": step, "reason": reason, "lr": lr, **cost, **({"last_eval": last} if last else {})}
        atomic_write_text(self.path / DIVERGED, json.dumps(record, indent=2) + "\n", self.path)

    def read_metrics(self, max_step: int | None = None) -> list[dict]:
        """The logged records (up to `max_step`). A torn last line (a kill mid-write) is dropped; any
        other unreadable line is an error naming it."""
        path = self.path / METRICS
        if not path.exists():
            path = self.path / METRICS_ARCHIVE
            if not path.exists():
                return []
        try:
            lines = (gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()).decode().splitlines()
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: unreadable ({e})") from None
        records = []
        for i, line in enumerate(lines, 1):
            try:
                rec = json.loads(line)
                step = rec["step"]
            except (json.JSONDecodeError, TypeError, KeyError) as e:
                if i == len(lines):
                    break
                raise ConfigError(f"{path}:{i}: not a metrics record ({e})") from None
            if max_step is None or step <= max_step:
                records.append(rec)
        return records

    def truncate_metrics(self, max_step: int) -> None:
        """Keeps the records up to `max_step` (those a resumed run would otherwise repeat go)."""
        if not (self.path / METRICS).exists():
            return
        records = self.read_metrics(max_step)
        atomic_write_text(self.path / METRICS, "".join(json.dumps(r) + "\n" for r in records), self.path)

    def archive_metrics(self) -> bool:
        """Replaces a finished run's metrics.jsonl by metrics.jsonl.gz holding the same bytes (checked before the
        plain file goes). False when there is no plain log; ValueError for a run that is not finished (its
        log still grows)."""
        plain = self.path / METRICS
        if not plain.exists():
            return False
        if not self.ended:
            raise ValueError(f"{self.path}: not finished (no {SUMMARY}); only an ended run's log is archived")
        data = plain.read_bytes()
        atomic_write_bytes(self.path / METRICS_ARCHIVE, gzip.compress(data, compresslevel=9, mtime=0), self.path)
        if gzip.decompress((self.path / METRICS_ARCHIVE).read_bytes()) != data:
            raise OSError(f"{self.path / METRICS_ARCHIVE}: does not read back as {plain}; the plain log is kept")
        plain.unlink()
        return True


def _load_checked(lm, path: Path, fingerprint: str, config: Path) -> None:
    """Loads weights into `lm` if the file was written by the run of `fingerprint` and holds `lm`'s tensors
    (`check_header`, before any is read), else CheckpointError."""
    if read_metadata(path).get("fingerprint") != fingerprint:
        raise CheckpointError(f"{path}: written by a run with a different config than {config}")
    check_header(path, lm)
    load_weights(lm, read_tensors(path)[0], path)


def load_snapshot(lm, run_dir: str | Path, step: int) -> None:
    """Loads the run's weights at `step` (its snapshot) into `lm`; CheckpointError for a snapshot that is
    missing, corrupt, or written by a run with a different config (a stale file is never read as this run's)."""
    run = RunDir(run_dir)
    path = run / snapshot_name(step)
    if not path.exists():
        raise CheckpointError(f"{path}: no snapshot at step {step}; the run has {snapshot_steps(run.path)}")
    _load_checked(lm, path, run.read_config().fingerprint(), run / CONFIG)


def load_run(run_dir: str | Path, device: str | torch.device = "cpu"):
    """(lm, task, config) of a finished run, the model in eval mode on `device`.

    Raises FileNotFoundError for a missing directory or weights, ConfigError for an invalid config,
    and CheckpointError for weights that are corrupt or do not match the config.
    """
    from mecheval.models import build_model
    from mecheval.tasks import make_task

    run = RunDir(run_dir)
    if not run.path.is_dir():
        raise FileNotFoundError(f"{run.path}: no such run directory")
    cfg = run.read_config()
    weights = run / MODEL
    if not weights.exists():
        hint = (" (the run is unfinished: resume it with `mecheval train --resume`)" if (run / CHECKPOINT).exists() else
                f" (committed without them, as a run that did not learn is: `mecheval reproduce {run.path} --restore` "
                "retrains it and writes them back once they match its digest)" if run.finished else "")
        raise FileNotFoundError(f"{weights}: no final weights{hint}")
    task = make_task(cfg.task.name, **cfg.task.params)
    lm = build_model(cfg.model)
    _load_checked(lm, weights, cfg.fingerprint(), run / CONFIG)
    return lm.to(device).eval(), task, cfg
