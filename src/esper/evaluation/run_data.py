"""A run's data as its commands and studies load and record it: every split loaded before anything is written (so a
missing or unusable dataset leaves no run directory behind), and what the run records of it beyond where it lies."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from esper.data.augment import Augment
from esper.data.batches import describe_augmentation
from esper.data.readers import DatasetFormatError, Split
from esper.data.tasks import DataCache, DataOptions, TaskSpec, data_source

__all__ = ["data_record", "load_splits"]


def data_record(task: TaskSpec, augment: Augment | None) -> dict[str, str]:
    """The training batches' augmentation in force and where the validation split comes from."""
    return {"augmentation": describe_augmentation(task.augmentation(augment)), "val_split": task.val_split}


def load_splits(options: DataOptions, task: TaskSpec, devices: Sequence[torch.device], splits: tuple[Split, ...],
                note: Callable[[str], None]) -> DataCache:
    """A cache holding every split a run needs; a --data-path whose content cannot be used is an error naming that file
    (the readers' own messages name the problem but not always the file). Where Fashion-MNIST is read from elsewhere
    than the data directory, `note` says so."""
    cache = DataCache(options)
    try:
        cache.preload(task, list(devices), splits)
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(f"--data-path {options.data_path} is not UTF-8 text ({exc.reason} at byte "
                                 f"{exc.start}): pass a UTF-8 .txt or .jsonl file") from exc
    except ValueError as exc:
        if options.data_path is None or str(options.data_path) in str(exc):
            raise
        raise DatasetFormatError(f"--data-path {options.data_path}: {exc}; pass a corpus the task can split into "
                                 f"train, validation and test") from exc
    source = data_source(task.name, cache.options)
    if task.name == "fashion_mnist" and Path(source) != Path(options.data_dir) / "fashion-mnist":
        note(f"Fashion-MNIST from {source} ({Path(options.data_dir) / 'fashion-mnist'} holds none)")
    return cache
