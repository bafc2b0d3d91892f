"""Where a run's work executes: devices, the plugins every process loads, worker processes and Ray actors, and the
host reads an accelerator waits for.

Parallel work computes the same numbers wherever it is placed (in this process, in worker processes, on a Ray
cluster): `WorkerOptions` fixes the thread count every process computes with, and every worker loads this process's
plugins before it builds anything, so the registries, and with them the action space, are the same everywhere.
`Readout` and `SyncCounter` keep an epoch to one read of device values on the host, and count the reads there are.
Above the tasks' data (a worker silences the data warnings its parent has already shown); below run storage, which
records the plugins a checkpoint was trained with.
"""

from esper.execution.devices import DeviceError, env_device_map, resolve_device, resolve_devices
from esper.execution.plugins import load_plugins

__all__ = ["DeviceError", "env_device_map", "load_plugins", "resolve_device", "resolve_devices"]
