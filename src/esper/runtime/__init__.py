"""Runtime: tasks and data, device placement, checkpoints and run directories."""

from esper.runtime.checkpoint import CheckpointFormatError, atomic_save, load_checkpoint
from esper.runtime.data import DeviceDataset, SharedBatch, SharedBatchIterator
from esper.runtime.devices import DeviceError, env_device_map, resolve_device, resolve_devices
from esper.runtime.plugins import load_plugins
from esper.runtime.readers import DatasetFormatError, DatasetNotFoundError
from esper.runtime.rundir import RunDirectory, RunDirectoryError
from esper.runtime.tasks import (
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
    "CheckpointFormatError",
    "DataCache",
    "DataOptions",
    "DatasetFormatError",
    "DatasetNotFoundError",
    "DeviceDataset",
    "DeviceError",
    "RunDirectory",
    "RunDirectoryError",
    "SharedBatch",
    "SharedBatchIterator",
    "TaskSpec",
    "arrays_task",
    "atomic_save",
    "env_device_map",
    "get_task_spec",
    "image_task",
    "load_checkpoint",
    "load_plugins",
    "register_task",
    "register_task_form",
    "resolve_device",
    "resolve_devices",
]
