"""Device strings: validation and the round-robin env → device map."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from esper.leyline.errors import UserInputError


class DeviceError(UserInputError):
    """A device string that names no usable device on this machine."""


def resolve_device(name: str) -> torch.device:
    """"auto" (cuda:0 when available, else cpu), "cpu", "cuda" or "cuda:N" with N < device_count."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise DeviceError(f"Invalid device '{name}': use 'auto', 'cpu' or 'cuda:N'") from exc
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise DeviceError(f"Unsupported device '{name}': use 'auto', 'cpu' or 'cuda:N'")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = 0 if device.index is None else device.index
    if index >= count:
        raise DeviceError(f"Device '{name}' is not available: this machine has {count} CUDA device(s)")
    return torch.device("cuda", index)


def resolve_devices(device: str, devices: Sequence[str] | None) -> list[torch.device]:
    """Env devices: `devices` when given, else [device]. Duplicates are rejected."""
    resolved = [resolve_device(d) for d in (devices if devices else [device])]
    if len(set(resolved)) != len(resolved):
        raise DeviceError(f"Duplicate devices in {list(devices or [])}: list each device once (envs are "
                          f"spread round-robin over the listed devices; n_envs sets how many)")
    return resolved


def env_device_map(n_envs: int, devices: Sequence[torch.device]) -> list[torch.device]:
    """Env i runs on devices[i mod D]; every device must get at least one env."""
    if n_envs < len(devices):
        raise UserInputError(f"{n_envs} env(s) cannot cover {len(devices)} devices: use n_envs >= number of devices")
    return [devices[i % len(devices)] for i in range(n_envs)]
