"""Training checkpoints (written atomically, `mecheval.common`): safetensors tensors plus JSON metadata, never pickle.

A checkpoint is one file, so one `os.replace` makes it visible whole: a run killed at any moment
leaves either the previous checkpoint or the new one. Tensors:
    model.<name>            the model's state_dict
    optim.<i>.<key>         AdamW state of parameter i (step, exp_avg, exp_avg_sq)
    rng.cpu, rng.cuda.<k>   torch generator states (uint8)
    accum.<name>            running sums of the metrics not yet logged
and metadata {"format": FORMAT, "state": JSON (step, fingerprint, data stream, wall time)}.
"""

from __future__ import annotations

import hashlib

import json
import math
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from mecheval.common import replacing
from mecheval.errors import MechevalError

FORMAT = "mecheval-checkpoint/1"
CHECKPOINT_EXTRA_BYTES = 2**20  # a checkpoint's tensors besides the model and AdamW's two moments: RNG states, steps, sums


class CheckpointError(MechevalError, RuntimeError):
    """A checkpoint or weights file that is unreadable, or does not match the run's config."""


def atomic_save_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str],
                        root: Path | None = None) -> None:
    """A safetensors file written whole or not at all, inside `root` (`common.replacing`)."""
    with replacing(path, root) as tmp:
        try:
            save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata=metadata)
        except SafetensorError as e:  # an OSError underneath (e.g. no space left on device)
            raise OSError(f"{path}: cannot write ({e})") from None


def weights_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over the tensors in name order: each name, dtype, shape and raw bytes."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a safetensors file; CheckpointError if missing or corrupt."""
    metadata = read_metadata(path)
    try:
        return load_file(str(path)), metadata
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None


def read_metadata(path: Path) -> dict[str, str]:
    """The metadata of a safetensors file, from its header alone; CheckpointError if missing or corrupt."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return f.metadata() or {}
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None


def check_header(path: Path, model: torch.nn.Module, prefix: str = "", others_bytes: int = 0) -> None:
    """Reads only the header of the safetensors file `path`: it must hold `prefix + name` for each tensor of
    `model`'s state_dict at its shape, and further tensors of at most `others_bytes` together (a checkpoint's
    optimiser state); CheckpointError naming the missing, unexpected and mis-shaped tensors otherwise, before
    any data is read (a planted 16 GiB tensor is never loaded)."""
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            dtypes = {k: f.get_slice(k).get_dtype() for k in shapes}
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None
    own = {prefix + k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(own) - set(shapes))
    mismatched = [f"{k}: file {shapes[k]} vs model {own[k]}" for k in sorted(set(own) & set(shapes)) if shapes[k] != own[k]]
    others = {k: math.prod(s) * _ITEMSIZE.get(dtypes[k], 8) for k, s in shapes.items() if k not in own}
    largest = sorted(others, key=others.get, reverse=True)[:5]
    too_much = sum(others.values()) > others_bytes if others_bytes else bool(others)
    if missing or mismatched or too_much:
        raise CheckpointError(
            f"{path}: weights unusable for the model built from the config"
            + (f"\n  missing: {missing}" if missing else "")
            + (f"\n  shape mismatch: {mismatched}" if mismatched else "")
            + (f"\n  unexpected: {largest}{' …' if len(others) > 5 else ''} ({sum(others.values()):,} bytes; "
               f"at most {others_bytes:,} expected)" if too_much else ""))


_ITEMSIZE = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
             "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}  # bytes per value of a safetensors dtype


def load_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor], source: Path) -> None:
    """Copies `tensors` (whose names and shapes `check_header` checked) into `model`; CheckpointError naming
    non-finite entries."""
    nonfinite = [f"{k} ({int((~torch.isfinite(v)).sum())} values)" for k, v in sorted(tensors.items())
                 if v.is_floating_point() and not torch.isfinite(v).all()]
    if nonfinite:
        raise CheckpointError(f"{source}: weights unusable for the model built from the config\n"
                              f"  non-finite (a corrupt file?): {nonfinite}")
    model.load_state_dict(tensors)


def save_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    accum: dict[str, torch.Tensor],
    state: dict,
) -> None:
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    for i, s in optimizer.state_dict()["state"].items():
        tensors.update({f"optim.{i}.{k}": v for k, v in s.items()})
    tensors["rng.cpu"] = torch.get_rng_state()
    if torch.cuda.is_available():
        tensors.update({f"rng.cuda.{k}": s for k, s in enumerate(torch.cuda.get_rng_state_all())})
    tensors.update({f"accum.{k}": v for k, v in accum.items()})
    atomic_save_tensors(path, tensors, {"format": FORMAT, "state": json.dumps(state)})


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, fingerprint: str
) -> tuple[dict[str, torch.Tensor], dict]:
    """Restores model, optimizer and RNG in place; returns (accum, state). Checks the config fingerprint."""
    metadata = read_metadata(path)
    if metadata.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a mecheval checkpoint (format {metadata.get('format')!r})")
    state = json.loads(metadata["state"])
    if state.get("fingerprint") != fingerprint:
        raise CheckpointError(
            f"{path}: checkpoint was written for a different config "
            f"(fingerprint {state.get('fingerprint')} != {fingerprint})"
        )
    params = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    check_header(path, model, "model.", others_bytes=2 * params + CHECKPOINT_EXTRA_BYTES)
    tensors, _ = read_tensors(path)
    groups = _by_prefix(tensors)
    load_weights(model, groups.get("model", {}), path)
    optim_state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in groups.get("optim", {}).items():
        i, name = key.split(".", 1)
        optim_state.setdefault(int(i), {})[name] = value
    sd = optimizer.state_dict()
    try:
        optimizer.load_state_dict({"state": optim_state, "param_groups": sd["param_groups"]})
    except (ValueError, KeyError, RuntimeError) as e:
        raise CheckpointError(f"{path}: optimizer state does not match the model ({e})") from None
    torch.set_rng_state(groups["rng"]["cpu"])
    cuda = [groups["rng"][k] for k in sorted(groups["rng"]) if k.startswith("cuda.")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    return groups.get("accum", {}), state


def _by_prefix(tensors: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        prefix, rest = key.split(".", 1)
        out.setdefault(prefix, {})[rest] = value
    return out
