"""Checkpoint files: plain dicts, atomic writes, format checks and RNG capture.

Every file loads with `torch.load(path, weights_only=True)`: values are tensors, numbers, strings, None and
containers of those, never pickled classes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

import esper
from esper.execution.plugins import loaded_plugins
from esper.kasmina.model import MorphogeneticModel
from esper.leyline.actions import UNRECORDED_HEADS, ActionSpace
from esper.leyline.atomic import atomic_write
from esper.leyline.errors import UserInputError

MODEL_FORMAT = "esper-model-v1"


class CheckpointFormatError(UserInputError):
    """A checkpoint file is unreadable, corrupt or of another format."""


def blueprint_record(space: ActionSpace) -> dict[str, Any]:
    """What a policy checkpoint records of the action space it was trained in: its blueprint head (in head order) and
    the plugins that were loaded, so that loading it elsewhere can name the plugins it needs."""
    return {"blueprints": list(space.head), "plugins": list(loaded_plugins())}


def check_blueprint_head(path: str | Path, data: Mapping[str, Any], current: ActionSpace) -> None:
    """Refuse a policy checkpoint whose blueprint head is not `current`'s: its heads, masks and features would mean
    other blueprints. A checkpoint that records no head was trained on its topology's built-in one."""
    recorded = data.get("blueprints")
    head = tuple(recorded) if isinstance(recorded, list) else UNRECORDED_HEADS.get(current.topology)
    if head == current.head:
        return
    raise CheckpointFormatError(f"{path} was trained with the {current.topology} blueprints {list(head or ())} (in "
                                f"policy head order), but this run has {list(current.head)}: {plugin_fix(data)} and "
                                f"no others, or retrain the policy")


def plugin_fix(data: Mapping[str, Any]) -> str:
    """How to load what a checkpoint was trained with: its recorded plugins as flags; for one trained without any,
    the plugins loaded now (entry points included) are what to leave out."""
    plugins = [str(p) for p in data.get("plugins") or [] if not str(p).startswith("ep:")]
    entry_points = [str(p) for p in data.get("plugins") or [] if str(p).startswith("ep:")]
    if plugins:
        return f"run it with the plugins it was trained with ({' '.join(f'--plugin {p}' for p in plugins)})"
    if entry_points:
        return f"install the packages of the entry points it was trained with ({', '.join(entry_points)})"
    loaded = list(loaded_plugins())
    if loaded:
        return (f"it was trained without plugins: run it without the ones loaded now ({', '.join(loaded)}; 'ep:' "
                f"names an installed 'esper.plugins' entry point, removed by uninstalling its package)")
    return "run it with the plugins it was trained with (--plugin MODULE)"


def detached_copy(obj: Any, device: str | None) -> Any:
    """Deep copy of a nested structure with every tensor detached and cloned: to `device` ("cpu" for files), or on
    its own device when None (a copy that never makes the host wait for an accelerator)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone() if device is None else obj.detach().to(device, copy=True)
    if isinstance(obj, dict):
        return {k: detached_copy(v, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [detached_copy(v, device) for v in obj]
    if isinstance(obj, tuple):
        return tuple(detached_copy(v, device) for v in obj)
    return obj


def atomic_save(obj: dict[str, Any], path: str | Path) -> None:
    """`torch.save` through `<path>.tmp` and a rename: a crash never leaves a half-written checkpoint."""
    atomic_write(path, lambda f: torch.save(obj, f), binary=True)


def load_checkpoint(path: str | Path, expected_format: str, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely and check its format; errors name the file and what was wrong."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointFormatError(f"Checkpoint not found: {path}; {_instead(path)}")
    try:
        data = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for truncated or foreign files; its text suggests unsafe loads
        raise CheckpointFormatError(f"Cannot read checkpoint {path} ({type(exc).__name__}): the file is corrupt or "
                                    f"not an esper checkpoint; {_instead(path)}") from exc
    found = data.get("format") if isinstance(data, dict) else None
    if found != expected_format:
        raise CheckpointFormatError(f"Checkpoint {path} has format {found!r}, expected {expected_format!r}")
    return data


def _instead(path: Path) -> str:
    """What to use in place of a missing or unreadable checkpoint: the other checkpoints beside it, if there are."""
    others = sorted(p.name for p in path.parent.glob("*.pt") if p.name != path.name) if path.parent.is_dir() else []
    if others:
        return (f"use another checkpoint of the run ({', '.join(others)} in {path.parent}; a PPO run resumes from one "
                f"with --resume FILE), or rerun the command that wrote it with --overwrite")
    return "pass a checkpoint an esper run saved (RUN/checkpoints/*.pt), or rerun the command that writes it"


def non_finite_tensors(obj: Any, prefix: str = "") -> list[str]:
    """Dotted names of the floating-point tensors in a nested structure that hold NaN or infinity."""
    if isinstance(obj, torch.Tensor):
        return [prefix] if obj.is_floating_point() and not bool(torch.isfinite(obj).all()) else []
    if isinstance(obj, dict):
        return [name for k, v in obj.items() for name in non_finite_tensors(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(obj, list | tuple):
        return [name for i, v in enumerate(obj) for name in non_finite_tensors(v, f"{prefix}[{i}]")]
    return []


def require_finite(data: dict[str, Any], path: str | Path, keys: tuple[str, ...]) -> None:
    """Refuse a checkpoint whose weights under `keys` hold NaN or infinity: a diverged model must not be loaded and
    then silently act (a NaN policy picks the first action forever)."""
    bad = [name for key in keys for name in non_finite_tensors(data.get(key), key)]
    if bad:
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        raise CheckpointFormatError(f"Checkpoint {path} holds non-finite values (NaN or infinity) in {bad[0]}{more}: "
                                    f"the run diverged; use an earlier checkpoint (e.g. checkpoints/best.pt)")


def require_keys(data: dict[str, Any], path: str | Path, keys: tuple[str, ...]) -> None:
    """Refuse a checkpoint lacking an entry its loader needs, naming the first missing one."""
    missing = [k for k in keys if k not in data]
    if missing:
        raise CheckpointFormatError(f"Checkpoint {path} lacks {missing!r}: it is incomplete or written by another "
                                    f"esper version; use a checkpoint saved by this version")


def model_checkpoint(model: MorphogeneticModel, *, task: str, host_optimizer: dict[str, Any] | None = None,
                     seed_optimizers: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `esper-model-v1` dict for a model (optionally with optimizer states)."""
    exported = model.export_state()
    return {
        "format": MODEL_FORMAT,
        "esper_version": esper.__version__,
        "task": task,
        "topology": model.topology,
        "slots": exported["slots"],
        "host": exported["host"],
        "seeds": exported["seeds"],
        "host_optimizer": host_optimizer,
        "seed_optimizers": seed_optimizers,
    }


def load_model_checkpoint(model: MorphogeneticModel, path: str | Path) -> dict[str, Any]:
    """Load an `esper-model-v1` file into a (fresh) model; seeds are re-instantiated from the registry."""
    data = load_checkpoint(path, MODEL_FORMAT)
    require_keys(data, path, ("topology", "slots", "host", "seeds"))
    require_finite(data, path, ("host", "seeds"))
    if data["topology"] != model.topology:
        raise CheckpointFormatError(f"Checkpoint {path} is for topology {data['topology']!r}, model is "
                                    f"{model.topology!r}")
    try:
        model.load_state({"slots": data["slots"], "host": data["host"], "seeds": data["seeds"]})
    except (KeyError, RuntimeError, ValueError) as exc:  # shape or key mismatches come back as RuntimeError
        raise CheckpointFormatError(f"Checkpoint {path} does not fit this model ({load_error_summary(exc)}): was it "
                                    f"saved for another task or width?") from exc
    return data


def load_error_summary(exc: BaseException) -> str:
    """The informative line of a state-dict loading error (torch puts a generic header first)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Error(s) in loading"):
        lines = lines[1:]
    return lines[0].rstrip(".") if lines else type(exc).__name__


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy, torch and CUDA RNG states as checkpoint-safe values."""
    np_state: tuple[Any, ...] = np.random.get_state()  # type: ignore[assignment]
    py_state = random.getstate()
    return {
        "python": [py_state[0], list(py_state[1]), py_state[2]],
        "numpy": [str(np_state[0]), torch.from_numpy(np.asarray(np_state[1]).astype(np.int64)),
                  int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
        "cuda": [s for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
