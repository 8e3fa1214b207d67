"""The unit every part of mecheval exchanges: a batch of task examples with their role positions."""

from __future__ import annotations

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

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(
            tokens=self.tokens.to(device),
            lengths=self.lengths.to(device),
            answer=self.answer.to(device),
            answer_pos=self.answer_pos.to(device),
            roles={k: v.to(device) for k, v in self.roles.items()},
            extra={k: v.to(device) for k, v in self.extra.items()},
        )

    def select(self, index: torch.Tensor | slice) -> "Batch":
        """The sub-batch of the examples at `index` (rows), keeping all fields aligned."""
        return Batch(
            tokens=self.tokens[index],
            lengths=self.lengths[index],
            answer=self.answer[index],
            answer_pos=self.answer_pos[index],
            roles={k: v[index] for k, v in self.roles.items()},
            extra={k: v[index] for k, v in self.extra.items()},
        )

    def with_tokens(self, tokens: torch.Tensor) -> "Batch":
        """The same batch (answers, roles) over different tokens of the same shape."""
        if tokens.shape != self.tokens.shape:
            raise ValueError(f"tokens shape {tuple(tokens.shape)} != {tuple(self.tokens.shape)}")
        return replace(self, tokens=tokens)
