"""Counterfactual batches: one token per example replaced, everything else kept."""

from __future__ import annotations

import numpy as np
import torch

from mecheval.tasks.base import Task
from mecheval.tasks.batch import Batch
from mecheval.tasks.sampling import absent, corruption_rng


def role_position(batch: Batch, role: str, corruptible: tuple[str, ...]) -> np.ndarray:
    """[B] the position of `role` (the first query's for multi-query batches)."""
    if role not in corruptible:
        raise ValueError(f"cannot corrupt role {role!r}; corruptible roles: {corruptible}")
    pos = batch.roles[role]
    return (pos[:, 0] if pos.dim() == 2 else pos).cpu().numpy()


def replace_at(batch: Batch, pos: np.ndarray, new: np.ndarray) -> Batch:
    """`batch` with tokens[b, pos[b]] = new[b]; answers, roles and extras unchanged."""
    tokens = batch.tokens.clone()
    rows = torch.arange(len(batch), device=tokens.device)
    tokens[rows, torch.as_tensor(pos, device=tokens.device)] = torch.as_tensor(
        new, dtype=tokens.dtype, device=tokens.device
    )
    return batch.with_tokens(tokens)


def replace_with_absent(task: Task, batch: Batch, role: str, seed: int) -> Batch:
    """The token at `role` replaced by one of its kind absent from the row (AR, MQAR).

    Its kind: a value of `task.value_range` for role "value", else a key of `task.key_range`.
    """
    pos = role_position(batch, role, task.corruptible_roles)
    lo, hi = task.value_range if role == "value" else task.key_range
    new = absent(corruption_rng(task.name, role, seed), batch.tokens.cpu().numpy(), lo, hi)
    return replace_at(batch, pos, new)
