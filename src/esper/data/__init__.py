"""Tasks and their data: what a run trains on, and nothing of where it runs or what it writes.

A task (`TaskSpec`) is a host, a loader of its splits, its optimizers and its loss scales. Every `--task` resolves
through one registry (`register_task`; the forms `npz:PATH`, `folder:DIR` and `family:KEY/TYPE` name tasks without
code). Readers and generators load a split as CPU tensors; `DeviceDataset` holds it on a device and
`SharedBatchIterator` gathers each batch once per device for every env there. Importing the package registers esper's
own tasks and forms, so a name resolves whichever module of it was imported first. Where work runs
(`esper.execution`) and what a run stores (`esper.storage`) sit above it: a task is the same wherever it runs.
"""

from esper.data.array_tasks import arrays_task
from esper.data.batches import DeviceDataset, SharedBatch, SharedBatchIterator
from esper.data.readers import DatasetFormatError, DatasetNotFoundError
from esper.data.task_registry import TASKS, register_task, register_task_form
from esper.data.task_spec import DataOptions, TaskSpec, image_task
from esper.data.tasks import DataCache, get_task_spec

__all__ = [
    "TASKS",
    "DataCache",
    "DataOptions",
    "DatasetFormatError",
    "DatasetNotFoundError",
    "DeviceDataset",
    "SharedBatch",
    "SharedBatchIterator",
    "TaskSpec",
    "arrays_task",
    "get_task_spec",
    "image_task",
    "register_task",
    "register_task_form",
]
