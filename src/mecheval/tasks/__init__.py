"""Synthetic retrieval tasks with known structure: `make_task(name, **params) -> Task`."""

from mecheval.tasks.base import Task
from mecheval.tasks.batch import Batch, length_groups
from mecheval.tasks.registry import TASKS, chance_accuracy, make_task

__all__ = ["Batch", "Task", "TASKS", "chance_accuracy", "length_groups", "make_task"]
