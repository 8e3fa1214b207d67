"""Where to patch: role names, role offsets and absolute positions, resolved per example.

A position spec is one of
    "query"        the position of a role of the batch (`batch.roles`)
    "key+3"        a role's position plus an offset ("value-1": one before the value)
    7 or "7"       an absolute token position (the same in every example)
    "key&query"    several specs joined with "&": patched together, in one cell
`resolve` turns specs into `{spec: positions}` ([B], or [B, K] for a joined spec) for `interchange_at`.
The `position` column of a table holds the specs: integers where every spec is an absolute position
(so a pivot orders them 0, 1, 2, …), else strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import torch

from mecheval.tasks import Batch

JOINED = "&"  # `key&query`: one cell patching both positions together
_PART = re.compile(r"^(?:(?P<role>[A-Za-z_]\w*)(?:(?P<sign>[+-])(?P<offset>\d+))?|(?P<index>\d+))$")

Position = str | int


def parse(spec: Position) -> list[tuple[str | None, int]]:
    """A spec -> its parts as (role, offset) or (None, absolute index); ValueError on a malformed spec."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec < 0:
            raise ValueError(f"position {spec} is negative; positions count from 0")
        return [(None, spec)]
    parts = []
    for text in str(spec).replace(" ", "").split(JOINED):
        m = _PART.match(text)
        if m is None:
            raise ValueError(f"position {spec!r} is not a role, a role offset (key+3, value-1) or an integer >= 0")
        if m["index"] is not None:
            parts.append((None, int(m["index"])))
        else:
            offset = int(m["offset"] or 0)
            parts.append((m["role"], -offset if m["sign"] == "-" else offset))
    return parts


def check(specs: Sequence[Position], roles: Sequence[str], owner: str = "this batch") -> None:
    """ValueError naming the specs that are malformed or name a role not in `roles` (of `owner`)."""
    unknown = list(dict.fromkeys(s for s in specs for role, _ in parse(s) if role is not None and role not in roles))
    if unknown:
        raise ValueError(f"positions {unknown} are not roles of {owner} (nor role offsets such as key+1, nor "
                         f"integers); roles: {', '.join(roles)}")


def resolve(batch: Batch, specs: Sequence[Position]) -> dict[Position, torch.Tensor]:
    """specs -> {key: positions [B] (one part) or [B, K] (joined)}; the keys are the specs, integers where
    every spec is an absolute position, else strings. ValueError where a role is unknown or a position
    falls outside 0 … T-1 for some example (saying how many)."""
    check(specs, list(batch.roles))
    B, T = batch.tokens.shape
    numeric = all(len(p) == 1 and p[0][0] is None for p in map(parse, specs))
    out: dict[Position, torch.Tensor] = {}
    for spec in specs:
        cols = [torch.full((B,), k, device=batch.tokens.device) if role is None else batch.roles[role] + k
                for role, k in parse(spec)]
        pos = cols[0] if len(cols) == 1 and cols[0].dim() == 1 else torch.stack(cols, -1).flatten(1)
        outside = ((pos < 0) | (pos >= T)).reshape(B, -1).any(1)
        if outside.any():
            raise ValueError(f"position {spec!r} falls outside the sequence (0 … {T - 1}) "
                             f"in {int(outside.sum())} of {B} examples")
        out[int(parse(spec)[0][1]) if numeric else str(spec).replace(" ", "")] = pos
    return out


def default(batch: Batch) -> list[str]:
    """Every role of the batch, and `key&query` where it has both (the joint patch the verdict reads)."""
    roles = list(batch.roles)
    return roles + ([f"key{JOINED}query"] if {"key", "query"} <= set(roles) else [])


def keys_as_column(where: Mapping[Position, torch.Tensor]) -> list[Position]:
    """The `position` column's values: integers where every key is one, else strings."""
    keys = list(where)
    return keys if all(isinstance(k, int) for k in keys) else [str(k) for k in keys]
