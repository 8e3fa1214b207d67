"""Multi-query associative recall (MQAR) as in the zoology benchmark.

Keys are K distinct tokens from [1, V/2), values K distinct tokens from [V/2, V); the context is
`k1 v1 … kK vK`. The rest of the sequence has (L - 2K) / 2 query slots (every other position); K
distinct slots are drawn with probability ∝ a·i^(a-1) (so queries cluster near the context), each
key is queried once, in random order, and its value is the answer at the query key's position.
Other positions are filler (PAD = 0, or random tokens with `random_filler`). Answers and roles have
shape [B, K], ordered by query position.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mecheval.tasks.base import MAX_SEQ_LEN, SPLITS, Task
from mecheval.tasks.batch import Batch
from mecheval.tasks.corruption import replace_with_absent
from mecheval.tasks.sampling import distinct, rng_for

PAD = 0


class MQARParams(BaseModel):
    """Parameters of MQAR (defaults: zoology's vocab 8192, length 64, 8 pairs, a = 0.01)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(8192, ge=4)
    seq_len: int = Field(64, ge=4, le=MAX_SEQ_LEN)
    n_pairs: int = Field(8, ge=1)
    power_a: float = Field(0.01, gt=0, le=1)
    random_filler: bool = False

    @model_validator(mode="after")
    def _fits(self) -> "MQARParams":
        slots = (self.seq_len - 2 * self.n_pairs) // 2
        if slots < self.n_pairs:
            raise ValueError(
                f"seq_len={self.seq_len} leaves {slots} query slots after the context, "
                f"fewer than n_pairs={self.n_pairs}"
            )
        if self.vocab_size // 2 - 1 < self.n_pairs:
            raise ValueError(f"vocab_size={self.vocab_size} has fewer than n_pairs={self.n_pairs} keys")
        return self


class MQARTask(Task):
    """Several queries per sequence; `answer`, `answer_pos` and roles are [B, n_pairs]."""

    name = "mqar"
    Params = MQARParams

    def __init__(self, params: MQARParams):
        self.params = params
        half = params.vocab_size // 2
        self.key_range = (1, half)
        self.value_range = (half, params.vocab_size)
        slots = (params.seq_len - 2 * params.n_pairs) // 2
        i = np.arange(1, slots + 1)
        self.slot_logp = np.log(params.power_a * i ** (params.power_a - 1))  # unnormalised

    @property
    def vocab_size(self) -> int:
        return self.params.vocab_size

    @property
    def special_tokens(self) -> dict[str, int]:
        """Only PAD (the filler); zoology's MQAR has no BOS/EOS."""
        return {"PAD": PAD}

    @property
    def roles(self) -> tuple[str, ...]:
        return ("key", "value", "query")

    @property
    def corruptible_roles(self) -> tuple[str, ...]:
        return ("key", "value")

    @property
    def chance_accuracy(self) -> float:
        return 1.0 / self.params.n_pairs

    def sample(self, n: int, seed: int, split: str = "train") -> Batch:
        rng = rng_for(self.name, seed, split, SPLITS)
        p = self.params
        k, ctx = p.n_pairs, 2 * p.n_pairs
        keys = self.key_range[0] + distinct(rng, n, self.key_range[1] - self.key_range[0], k)
        values = self.value_range[0] + distinct(rng, n, self.value_range[1] - self.value_range[0], k)
        # K slots without replacement, ∝ p: the top K of log p + Gumbel noise (the order of draws).
        gumbel = self.slot_logp - np.log(-np.log(rng.random((n, len(self.slot_logp)))))
        slots = np.argsort(-gumbel, axis=1)[:, :k]  # slot of key j, in draw order
        tokens = np.full((n, p.seq_len), PAD, dtype=np.int64)
        if p.random_filler:
            tokens[:] = rng.integers(0, p.vocab_size, size=tokens.shape)
        tokens[:, 0:ctx:2] = keys
        tokens[:, 1:ctx:2] = values
        qpos = ctx + 2 * slots  # [B, K]
        rows = np.arange(n)[:, None]
        tokens[rows, qpos] = keys
        order = np.argsort(qpos, axis=1)  # queries by position
        j = np.take_along_axis(np.tile(np.arange(k), (n, 1)), order, axis=1)  # pair of each query
        qpos = np.take_along_axis(qpos, order, axis=1)
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
        return Batch(
            tokens=t(tokens),
            lengths=torch.full((n,), p.seq_len, dtype=torch.long),
            answer=t(np.take_along_axis(values, j, axis=1)),
            answer_pos=t(qpos),
            roles={"key": t(2 * j), "value": t(2 * j + 1), "query": t(qpos)},
        )

    def corrupt(self, batch: Batch, role: str, seed: int) -> Batch:
        """The first query's key (or value) in context, by a key (value) absent from the sequence."""
        return replace_with_absent(self, batch, role, seed)

    def decode(self, tokens: torch.Tensor | list[int]) -> list[str]:
        out = []
        for t in torch.as_tensor(tokens).tolist():
            if t == PAD:
                out.append("_")
            elif t < self.key_range[1]:
                out.append(f"k{t}")
            else:
                out.append(f"v{t - self.value_range[0]}")
        return out
