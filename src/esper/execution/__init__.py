"""Where the work of a run executes."""

from esper.execution.devices import DeviceError, env_device_map, resolve_device, resolve_devices
from esper.execution.plugins import load_plugins

__all__ = ["DeviceError", "env_device_map", "load_plugins", "resolve_device", "resolve_devices"]
