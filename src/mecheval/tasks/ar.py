"""Associative Recall (AR) as published: `<bos> k1 v1 … kN vN <eos> kq vq <eos>`, one query.

Token ids: PAD 0, BOS 1, EOS 2, keys [3, 3+n_keys), values [3+n_keys, 3+n_keys+n_values). Keys are
drawn without replacement, values too, paired at random per document; the query is uniform over the
pairs. The answer vq is predicted at the position of kq.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mecheval.tasks.base import MAX_SEQ_LEN, SPLITS
from mecheval.tasks.batch import Batch
from mecheval.tasks.corruption import replace_with_absent
from mecheval.tasks.document import BOS, EOS, N_SPECIAL, SPECIAL_NAMES, DocumentTask
from mecheval.tasks.sampling import corruption_rng, distinct, rng_for


class ARParams(BaseModel):
    """Parameters of AR (defaults: the published 16 pairs over 4096 keys + 4096 values)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_pairs: int = Field(16, ge=1, le=(MAX_SEQ_LEN - 5) // 2, description="key-value pairs per document")
    n_keys: int = Field(4096, ge=1, description="size of the key vocabulary")
    n_values: int = Field(4096, ge=1, description="size of the value vocabulary")

    @model_validator(mode="after")
    def _enough_tokens(self) -> "ARParams":
        for name in ("n_keys", "n_values"):
            if getattr(self, name) < self.n_pairs:
                raise ValueError(f"n_pairs={self.n_pairs} needs {name} >= n_pairs, got {getattr(self, name)}")
        return self


class ARTask(DocumentTask):
    """Single-query associative recall; every document has length 2 * n_pairs + 5."""

    name = "ar"
    Params = ARParams

    def __init__(self, params: ARParams):
        self.params = params
        self.key_range = (N_SPECIAL, N_SPECIAL + params.n_keys)
        self.value_range = (self.key_range[1], self.key_range[1] + params.n_values)

    @property
    def vocab_size(self) -> int:
        return self.value_range[1]

    @property
    def chance_accuracy(self) -> float:
        """Picking one of the context's values at random."""
        return 1.0 / self.params.n_pairs

    @property
    def seq_len(self) -> int:
        return 2 * self.params.n_pairs + 5

    def sample(self, n: int, seed: int, split: str = "train") -> Batch:
        rng = rng_for(self.name, seed, split, SPLITS)
        p = self.params
        keys = self.key_range[0] + distinct(rng, n, p.n_keys, p.n_pairs)  # [B, N]
        values = self.value_range[0] + distinct(rng, n, p.n_values, p.n_pairs)  # [B, N]
        q = rng.integers(0, p.n_pairs, size=n)  # [B] queried pair
        rows = np.arange(n)
        tokens = np.empty((n, self.seq_len), dtype=np.int64)
        tokens[:, 0] = BOS
        tokens[:, 1 : 2 * p.n_pairs + 1 : 2] = keys
        tokens[:, 2 : 2 * p.n_pairs + 2 : 2] = values
        sep = 2 * p.n_pairs + 1
        tokens[:, sep] = EOS
        tokens[:, sep + 1] = keys[rows, q]
        tokens[:, sep + 2] = values[rows, q]
        tokens[:, sep + 3] = EOS
        full = lambda v: torch.full((n,), v, dtype=torch.long)  # noqa: E731
        return Batch(
            tokens=torch.from_numpy(tokens),
            lengths=full(self.seq_len),
            answer=torch.from_numpy(values[rows, q]),
            answer_pos=full(sep + 1),
            roles={
                "key": torch.from_numpy(1 + 2 * q),
                "value": torch.from_numpy(2 + 2 * q),
                "sep": full(sep),
                "query": full(sep + 1),
            },
        )

    def corrupt(self, batch: Batch, role: str, seed: int) -> Batch:
        """Key or query: a key absent from the document; value: a value absent from it."""
        return replace_with_absent(self, batch, role, seed)

    def move(self, batch: Batch, seed: int) -> tuple[Batch, torch.Tensor]:
        """The queried pair swapped with another pair of its document (drawn per example): query and answer
        unchanged, the queried key and value in another slot, the clean value's slot now holding the other
        pair's value; both absolute positions and distances to the query change."""
        n = self.params.n_pairs
        if n < 2:
            raise ValueError(f"moving the queried pair needs n_pairs >= 2, got {n}")
        q = (batch.roles["key"] - 1) // 2  # [B] queried slot
        shift = torch.from_numpy(corruption_rng(self.name, "move", seed).integers(1, n, size=len(batch)))
        j = (q + shift.to(q.device)) % n  # [B] another slot
        rows = torch.arange(len(batch), device=q.device)
        tokens = batch.tokens.clone()
        for offset in (1, 2):  # key, then value
            a, b = offset + 2 * q, offset + 2 * j
            tokens[rows, a], tokens[rows, b] = batch.tokens[rows, b], batch.tokens[rows, a]
        roles = batch.roles | {"key": 1 + 2 * j, "value": 2 + 2 * j}
        return replace(batch, tokens=tokens, roles=roles), batch.roles["value"].clone()

    def answer_derivable(self, batch: Batch) -> torch.Tensor:
        """[B] whether the queried key occurs in the context followed by the answer."""
        t = batch.tokens
        n = 2 * self.params.n_pairs
        rows = torch.arange(len(batch))
        query = t[rows, batch.roles["query"]]
        hit = (t[:, 1:n:2] == query[:, None]) & (t[:, 2 : n + 1 : 2] == batch.answer[:, None])
        return hit.any(1)

    def decode(self, tokens: torch.Tensor | list[int]) -> list[str]:
        out = []
        for t in torch.as_tensor(tokens).tolist():
            if t in SPECIAL_NAMES:
                out.append(SPECIAL_NAMES[t])
            elif t < self.key_range[1]:
                out.append(f"k{t - self.key_range[0]}")
            else:
                out.append(f"v{t - self.value_range[0]}")
        return out
