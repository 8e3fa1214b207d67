"""Task names -> constructors: `make_task(name, **params)` validates `params` with the task's model."""

from __future__ import annotations

from mecheval.tasks.ar import ARTask
from mecheval.tasks.atr import ATRTask
from mecheval.tasks.base import Task
from mecheval.tasks.mqar import MQARTask

TASKS: dict[str, type[Task]] = {"ar": ARTask, "mqar": MQARTask, "atr": ATRTask}


def make_task(name: str, **params) -> Task:
    """Builds the task `name` ("ar", "mqar", "atr") with `params` validated by its `Params` model.

    Raises ValueError for an unknown name, and pydantic's ValidationError (a ValueError naming the
    field) for unknown or invalid parameters. `make_task(t.name, **t.params.model_dump())` rebuilds t.
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; expected one of {sorted(TASKS)}")
    task_cls = TASKS[name]
    return task_cls(task_cls.Params(**params))
