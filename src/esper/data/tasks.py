"""Tasks: the registry every command resolves `--task` through, and the data of a run.

A task is registered in one place (`register_task`, Gymnasium style), by esper for its own tasks
(`esper.data.builtin_tasks`) and by a user's plugin module for theirs; `npz:PATH.npz` and `folder:DIR` name tasks on
files of your own (`esper.data.array_tasks`). `DataCache` owns the device-resident split pools of one run and draws
the capped subsets an episode trains on.
"""

from __future__ import annotations

import torch

from esper.data.array_tasks import arrays_task  # importing it registers the npz: and folder: forms
from esper.data.batches import DeviceDataset
from esper.data.builtin_tasks import SYNTHETIC_DATA_SEED  # importing it registers esper's own tasks
from esper.data.family_tasks import instance_task  # importing it registers the family: form
from esper.data.readers import SPLITS, Split, fashion_mnist_directory
from esper.data.task_registry import TASKS, register_task, register_task_form
from esper.data.task_spec import DataOptions, TaskSpec, image_task
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed

__all__ = ["SYNTHETIC_DATA_SEED", "TASKS", "DataCache", "DataOptions", "TaskSpec", "arrays_task", "data_source",
           "draw_subset", "get_task_spec", "image_task", "instance_task", "register_task", "register_task_form"]


def data_source(task: str, options: DataOptions) -> str:
    """Where a task's data comes from, as runs record it (Fashion-MNIST may come from the system's directory when
    --data-dir has none)."""
    source = get_task_spec(task).source
    if source is not None:
        return source
    if task == "fashion_mnist":
        found = fashion_mnist_directory(options.data_dir)
        return str(found) if found is not None else f"{options.data_dir / 'fashion-mnist'} (missing)"
    if task.startswith("cifar10"):
        return str(options.data_dir / "cifar-10-batches-py")
    if task == "tinystories":
        return str(options.data_path or options.data_dir / "tinystories")
    return f"task {task}'s own loader"


def get_task_spec(name: str) -> TaskSpec:
    """The task `name` names: a registered task (any case; a plugin's too) or a task form such as `npz:PATH.npz`."""
    return TASKS.resolve(name)


def draw_subset(pool_size: int, size: int, seed: int) -> torch.Tensor:
    """`size` distinct indices of a pool, drawn on CPU from `seed` and kept in pool order."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(pool_size, generator=generator)[:size].sort().values


class DataCache:
    """The device-resident split pools of one run (each loaded once per task, split and device) and the capped
    subsets drawn from them.

    A sample cap draws a random subset of the pool from a data seed rather than a prefix: every controller of one
    paired episode (same seed) sees the same samples, and episodes with other seeds see other samples, so neither
    training nor the reported numbers hang on one fixed handful of images.
    """

    def __init__(self, options: DataOptions) -> None:
        self.options = options
        self._pools: dict[tuple[str, str, str], DeviceDataset] = {}

    def preload(self, task: TaskSpec, devices: list[torch.device], splits: tuple[Split, ...] = ("train", "val")
                ) -> None:
        """Load every split a run needs up front, so a missing dataset fails before anything is written."""
        for device in devices:
            for split in splits:
                self.pool(task, split, device)

    def pool(self, task: TaskSpec, split: Split, device: torch.device | str) -> DeviceDataset:
        """The whole split on `device`."""
        if split not in SPLITS:
            raise UserInputError(f"Unknown split '{split}'. Available: {list(SPLITS)}")
        key = (task.name, split, str(torch.device(device)))
        if key not in self._pools:
            self._pools[key] = task.dataset(self.options, split, device)
        return self._pools[key]

    def get(self, task: TaskSpec, split: Split, device: torch.device | str, max_samples: int | None = None, *,
            seed: int | None = None) -> DeviceDataset:
        """The split on `device`; capped below its size, the subset that `seed` draws (the same on every device)."""
        pool = self.pool(task, split, device)
        if max_samples is not None and max_samples < 1:
            raise UserInputError(f"A sample cap must be >= 1 or None, got {max_samples}")
        if max_samples is None or max_samples >= pool.num_full:
            return pool
        if seed is None:
            raise UserInputError(f"A capped {split} split is a random subset: a data seed must draw it")
        return pool.subset(draw_subset(pool.num_full, max_samples, derive_seed(seed, "subset", split)))
