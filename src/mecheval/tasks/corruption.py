"""Counterfactual batches: one token per example replaced, everything else kept."""

from __future__ import annotations

import numpy as np
import torch

from mecheval.tasks.batch import Batch


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
