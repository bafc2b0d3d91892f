"""Runtime: tasks and data, device placement, checkpoints and run directories."""

from esper.runtime.checkpoint import CheckpointFormatError, atomic_save, load_checkpoint
from esper.runtime.data import DeviceDataset, SharedBatch, SharedBatchIterator
from esper.runtime.devices import DeviceError, env_device_map, resolve_device, resolve_devices
from esper.runtime.readers import DatasetFormatError, DatasetNotFoundError
from esper.runtime.rundir import RunDirectory, RunDirectoryError
from esper.runtime.tasks import TASKS, DataCache, DataOptions, TaskSpec, get_task_spec

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
    "atomic_save",
    "env_device_map",
    "get_task_spec",
    "load_checkpoint",
    "resolve_device",
    "resolve_devices",
]
