"""Tasks and their data."""

from esper.data.batches import DeviceDataset, SharedBatch, SharedBatchIterator
from esper.data.readers import DatasetFormatError, DatasetNotFoundError
from esper.data.tasks import (
    TASKS,
    DataCache,
    DataOptions,
    TaskSpec,
    arrays_task,
    get_task_spec,
    image_task,
    register_task,
    register_task_form,
)

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
