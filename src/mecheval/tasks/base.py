"""The interface every task implements (AR, MQAR, ATR)."""

from __future__ import annotations

import abc

import torch

from mecheval.tasks.batch import Batch

SPLITS = ("train", "test")
MAX_SEQ_LEN = 2**14  # the longest sequence a task's parameters may ask for (refused when validated, not when allocated)


class Task(abc.ABC):
    """A seeded generator of retrieval examples with known role positions.

    Subclasses are built by `mecheval.tasks.make_task(name, **params)` (a zoo name or an import path
    `package.module:MyTask`) as `cls(cls.Params(**params))`; `params` is the validated `Params` model
    (so `task.params.model_dump()` reproduces the task). The contract, checked at load by `check_task`:
    a class attribute `name`, `Params` (a pydantic model), and every abstract member below. Tasks whose
    `corrupt` uses `corruption.replace_with_absent` also set `key_range` / `value_range`.
    """

    name: str
    Params: type  # the pydantic model of the parameters (extra="forbid")
    params: object
    key_range: tuple[int, int]  # [lo, hi) of the key token ids (where corruption draws a new key)
    value_range: tuple[int, int]  # [lo, hi) of the value token ids

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

    def move(self, batch: Batch, seed: int) -> tuple[Batch, torch.Tensor]:
        """The pointer control's counterfactual (`interventions.pointer`): the queried association moved to
        other positions of the same document with the answer unchanged -> (the moved batch, [B] the clean
        value's position, which in the moved batch holds another token or, where no move was possible, the
        answer). A model that carries only *where* the value is reads the token now there. Optional: tasks
        without it raise NotImplementedError and their runs get no pointer control."""
        raise NotImplementedError(f"task {self.name!r} defines no move of the queried association (Task.move)")

    @property
    def chance_accuracy(self) -> float:
        """Accuracy of guessing uniformly among the plausible answers (for reports)."""
        return 0.0

    @property
    def training_set_size(self) -> int | None:
        """The size of a fixed training set the task prescribes (`training_set`), None where it draws its training
        examples (the default). A run on such a task gives `train_size` (at most this) and reads that set as its pool."""
        return None

    def training_set(self, n: int) -> Batch:
        """The first `n` examples of the task's fixed training set, in its order (only where `training_set_size` is
        set): the pool of a run with `train_size` n, whatever its seed."""
        raise NotImplementedError(f"task {self.name!r} has no fixed training set (Task.training_set_size is None)")

    @property
    def length_groups(self) -> int:
        """The groups of similar length a training batch is computed in by default (`TrainConfig.length_groups`,
        `batch.length_groups`): 1 for documents of one length (a batch is one group anyway); a task whose
        lengths vary says how many make a step pay for its tokens rather than its padding."""
        return 1


def check_task(obj: object, name: str) -> type[Task]:
    """`obj` as a Task class, or PluginError naming `name` and every part of the contract it misses."""
    from pydantic import BaseModel

    from mecheval.plugins import PluginError

    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise PluginError(f"task {name!r}: expected a subclass of mecheval.tasks.Task, got {obj!r}")
    problems = [f"{m} is not defined" for m in sorted(obj.__abstractmethods__)]
    if not isinstance(getattr(obj, "name", None), str):
        problems.append("class attribute name (a str) is not defined")
    params = getattr(obj, "Params", None)
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        problems.append("Params (a pydantic model of the parameters) is not defined")
    if problems:
        raise PluginError(f"task {name!r}: " + "; ".join(problems))
    return obj
