"""The interface every task implements (AR, MQAR, ATR)."""

from __future__ import annotations

import abc

import torch

from mecheval.tasks.batch import Batch

SPLITS = ("train", "test")


class Task(abc.ABC):
    """A seeded generator of retrieval examples with known role positions.

    Subclasses are built by `mecheval.tasks.make_task(name, **params)`; `params` is a `Params` model
    holding the validated parameters (so `task.params.model_dump()` reproduces the task).
    """

    name: str
    Params: type  # the pydantic model of the parameters (extra="forbid")
    params: object

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of token ids (specials included); the model's embedding size."""

    @property
    @abc.abstractmethod
    def special_tokens(self) -> dict[str, int]:
        """Name -> id of the special tokens (at least `PAD`, `BOS`, `EOS`)."""

    @property
    def roles(self) -> tuple[str, ...]:
        """The role names every batch of this task carries."""
        return ("key", "value", "sep", "query")

    @property
    def splits(self) -> tuple[str, ...]:
        """Split names `sample` accepts."""
        return SPLITS

    @property
    def corruptible_roles(self) -> tuple[str, ...]:
        """Roles `corrupt` accepts."""
        return ("key", "value")

    @abc.abstractmethod
    def sample(self, n: int, seed: int, split: str = "train") -> Batch:
        """`n` examples, a deterministic function of (params, seed, split)."""

    @abc.abstractmethod
    def corrupt(self, batch: Batch, role: str, seed: int) -> Batch:
        """A counterfactual copy: the token at `role` replaced by a different token of the same kind.

        Everything else (other tokens, `answer`, `answer_pos`, roles) is identical.
        """

    @abc.abstractmethod
    def decode(self, tokens: torch.Tensor | list[int]) -> list[str]:
        """Readable strings for a 1-D sequence of token ids."""

    @property
    def chance_accuracy(self) -> float:
        """Accuracy of guessing uniformly among the plausible answers (for reports)."""
        return 0.0
