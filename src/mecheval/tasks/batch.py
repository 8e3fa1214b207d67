"""The unit every part of mecheval exchanges: a batch of task examples with their role positions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch


@dataclass(frozen=True)
class Batch:
    """A batch of B sequences, right-padded with PAD to length T.

    tokens:     LongTensor [B, T]
    lengths:    LongTensor [B]      true length of each sequence
    answer:     LongTensor [B] (or [B, Q] for multi-query tasks) the target token(s)
    answer_pos: LongTensor like `answer`: the position whose next-token prediction is the answer
    roles:      name -> LongTensor like `answer`: the position of that role in each sequence
                (at least `key`, `value`, `sep`, `query`)
    extra:      name -> task-specific tensor with the batch dimension first (e.g. ATR's dependency
                tree: `parent` [B, T] position of each token's head or -1, `depth` [B, T])
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    answer: torch.Tensor
    answer_pos: torch.Tensor
    roles: dict[str, torch.Tensor] = field(default_factory=dict)
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "Batch":
        """The batch with `fn` applied to every tensor (all keep their batch dimension first)."""
        return Batch(
            tokens=fn(self.tokens),
            lengths=fn(self.lengths),
            answer=fn(self.answer),
            answer_pos=fn(self.answer_pos),
            roles={k: fn(v) for k, v in self.roles.items()},
            extra={k: fn(v) for k, v in self.extra.items()},
        )

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        return self.map(lambda t: t.to(device, non_blocking=non_blocking))

    def to_device(self, device: torch.device) -> "Batch":
        """The batch on `device`. To a GPU it goes from pinned memory without waiting: a copy from pageable
        memory first waits for the GPU's queued work, so the CPU could not prepare the next step meanwhile."""
        if device.type != "cuda" or self.tokens.is_cuda:
            return self.to(device)
        return self.map(torch.Tensor.pin_memory).to(device, non_blocking=True)

    def select(self, index: torch.Tensor | slice) -> "Batch":
        """The sub-batch of the examples at `index` (rows), keeping all fields aligned."""
        return self.map(lambda t: t[index])

    def with_tokens(self, tokens: torch.Tensor) -> "Batch":
        """The same batch (answers, roles) over different tokens of the same shape."""
        if tokens.shape != self.tokens.shape:
            raise ValueError(f"tokens shape {tuple(tokens.shape)} != {tuple(self.tokens.shape)}")
        return replace(self, tokens=tokens)

    def trimmed(self, length: int | None = None) -> "Batch":
        """The batch cut to `length` columns (default: its longest sequence). Extras with a time axis
        ([B, T, …]) are cut with the tokens; every mixer is causal and padding is on the right, so the
        outputs at positions < length are those of the padded batch."""
        T = self.tokens.shape[1]
        length = int(self.lengths.max()) if length is None else length
        if not 0 < length <= T:
            raise ValueError(f"cannot trim a batch of length {T} to {length}")
        cut = lambda x: x[:, :length] if x.dim() >= 2 and x.shape[1] == T else x  # noqa: E731
        return replace(self, tokens=self.tokens[:, :length], extra={k: cut(v) for k, v in self.extra.items()})

    def by_length(self, n: int) -> list[tuple[torch.Tensor, "Batch"]]:
        """(rows, sub-batch of those rows cut to its longest) for each of at most `n` groups of similar
        length (`length_groups`); together they hold every example once."""
        return [(rows, self.select(rows).trimmed()) for rows in length_groups(self.lengths, n)]


def length_groups(lengths: torch.Tensor, n: int) -> list[torch.Tensor]:
    """Row indices of at most `n` groups of similar length that together cover the batch.

    lengths [B] -> LongTensors of rows, shortest group first. The split points minimise the padded
    tokens Σ_g |g| · (longest in g), exactly (dynamic programming over the sorted lengths, cutting only
    where the length changes); fewer groups are kept where more would not save a token, so a batch of
    one length (AR) stays one group.
    """
    if n < 1:
        raise ValueError(f"length_groups must be >= 1, got {n}")
    order = torch.argsort(lengths, stable=True)
    ls = lengths[order].tolist()
    bounds = [0, *(i for i in range(1, len(ls)) if ls[i] != ls[i - 1]), len(ls)]
    m = len(bounds) - 1
    cost = lambda i, j: (bounds[j] - bounds[i]) * ls[bounds[j] - 1]  # noqa: E731  rows of runs i..j-1, padded
    # best[j]: least tokens for the first j runs in at most k groups (k grows each pass); back[k][j]: where
    # the last group starts, or None where k - 1 groups do as well
    best = [0] + [cost(0, j) for j in range(1, m + 1)]
    back: list[list[int | None]] = [[0] * (m + 1)]
    for _ in range(1, min(n, m)):
        new, arg = best[:1], [None]
        for j in range(1, m + 1):
            c, i = min((best[i] + cost(i, j), i) for i in range(1, j)) if j > 1 else (best[j], None)
            new.append(min(c, best[j]))
            arg.append(i if c < best[j] else None)
        best = new
        back.append(arg)
    groups, j = [], m
    for arg in reversed(back):
        i = arg[j]
        if i is None:
            continue
        groups.append(order[bounds[i]:bounds[j]])
        j = i
    return groups[::-1]
