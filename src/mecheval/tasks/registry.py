"""Task names -> classes, the zoo registered by import path like any plug-in: `make_task(name, **params)`."""

from __future__ import annotations

import functools

from mecheval.plugins import PluginError, is_import_path, load
from mecheval.tasks.base import Task, check_task

ZOO: dict[str, str] = {
    "ar": "mecheval.tasks.ar:ARTask",
    "mqar": "mecheval.tasks.mqar:MQARTask",
    "atr": "mecheval.tasks.atr:ATRTask",
}


@functools.cache
def task_class(name: str) -> type[Task]:
    """The class of zoo task `name` or of the plug-in at import path `name`, checked against the contract."""
    if name not in ZOO and not is_import_path(name):
        raise PluginError(f"unknown task {name!r}; expected one of {sorted(ZOO)} or an import path 'package.module:Class'")
    return check_task(load(ZOO.get(name, name), "task"), name)


TASKS: dict[str, type[Task]] = {name: task_class(name) for name in ZOO}


def make_task(name: str, **params) -> Task:
    """Builds the task `name` ("ar", "mqar", "atr", or `package.module:Class`) with `params` validated by
    its `Params` model.

    Raises ValueError for an unknown name or a broken plug-in, and pydantic's ValidationError (a
    ValueError naming the field) for unknown or invalid parameters. `make_task(t.name, **t.params.model_dump())`
    rebuilds a zoo task t.
    """
    task_cls = task_class(name)
    return task_cls(task_cls.Params(**params))


def chance_accuracy(task: dict) -> float:
    """The chance accuracy of a config's `task:` section ({"name", "params"}); NaN for a plug-in task (reading
    results imports no plug-in)."""
    if is_import_path(task["name"]):
        return float("nan")
    return make_task(task["name"], **task.get("params", {})).chance_accuracy
