"""Task registry: what a task trains (host, data, optimizers, lifecycle thresholds, loss scales).

`DataCache` owns the device-resident split pools of one run and draws the capped subsets an episode trains on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import torch
from torch import nn

from esper.kasmina.hosts import CNNHost, TransformerHost
from esper.kasmina.state import LifecycleConfig
from esper.leyline.constants import DEFAULT_BATCH_SIZE_TRAINING, DEFAULT_DROPOUT, DEFAULT_HOST_LR, DEFAULT_SEED_LR
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed
from esper.runtime.data import Augmentation, DeviceDataset, Normalization
from esper.runtime.optim import OptimizerSpec
from esper.runtime.readers import (
    SPLITS,
    VOCAB_SIZE,
    Split,
    TokenWindows,
    download_cifar10,
    fashion_mnist_directory,
    load_cifar10,
    load_fashion_mnist,
    load_tinystories,
)
from esper.runtime.synthetic import generate_synthetic_images, load_synthetic_text

TaskType = Literal["classification", "lm"]
SYNTHETIC_DATA_SEED = 0
"""The synthetic tasks are one fixed dataset each: the data seed is part of the task, not of the run."""


@dataclass(frozen=True, slots=True)
class DataOptions:
    """Where a run's data comes from (CLI: --data-dir, --data-path, --download)."""

    data_dir: Path = Path("data")
    data_path: Path | None = None
    download: bool = False


Loader = Callable[[DataOptions, Split, int], "tuple[torch.Tensor, torch.Tensor] | TokenWindows"]


@dataclass(frozen=True)
class TaskSpec:
    name: str
    topology: Literal["cnn", "transformer"]
    task_type: TaskType
    num_outputs: int  # classes (classification) or vocabulary size (lm)
    input_shape: tuple[int, ...]
    host_factory: HostFactory
    loader: Loader
    host_optimizer: OptimizerSpec
    seed_optimizer: OptimizerSpec
    target_loss: float
    typical_loss_delta_std: float
    default_batch_size: int
    val_batch_size: int
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)
    block_size: int | None = None
    augment: Augmentation | None = None
    normalization: Normalization | None = None

    @property
    def random_guess_loss(self) -> float:
        """Loss of a uniform prediction: ln(classes) or ln(vocabulary)."""
        return math.log(self.num_outputs)

    def load(self, options: DataOptions, split: Split) -> tuple[torch.Tensor, torch.Tensor] | TokenWindows:
        """CPU tensors of a whole split; raises DatasetNotFoundError when absent."""
        return self.loader(options, split, self.block_size or 0)

    def dataset(self, options: DataOptions, split: Split, device: torch.device | str) -> DeviceDataset:
        data = self.load(options, split)
        if isinstance(data, TokenWindows):
            return DeviceDataset.from_windows(data, device)
        inputs, targets = data
        return DeviceDataset(inputs, targets, device, self.normalization)


def _synthetic(options: DataOptions, split: Split, _: int) -> tuple[torch.Tensor, torch.Tensor]:
    return generate_synthetic_images(SYNTHETIC_DATA_SEED, split)


def _cifar10(options: DataOptions, split: Split, _: int) -> tuple[torch.Tensor, torch.Tensor]:
    if options.download:
        download_cifar10(options.data_dir)
    return load_cifar10(options.data_dir, split)


def _fashion_mnist(options: DataOptions, split: Split, _: int) -> tuple[torch.Tensor, torch.Tensor]:
    return load_fashion_mnist(options.data_dir, split)


def _tinystories(options: DataOptions, split: Split, block_size: int) -> TokenWindows:
    return load_tinystories(options.data_dir, split, block_size, data_path=options.data_path)


def _synthetic_text(options: DataOptions, split: Split, block_size: int) -> TokenWindows:
    return load_synthetic_text(SYNTHETIC_DATA_SEED, split, block_size)


_CNN_SGD = OptimizerSpec("sgd", lr=DEFAULT_HOST_LR, momentum=0.9, weight_decay=5e-4)
_SEED_SGD = OptimizerSpec("sgd", lr=DEFAULT_SEED_LR, momentum=0.9)
_LM_LIFECYCLE = LifecycleConfig(min_training_epochs=5)
_SYNTHETIC_SGD = OptimizerSpec("sgd", lr=0.05, momentum=0.9, weight_decay=5e-4)
"""At lr 0.01 the host on `synthetic` is still climbing at epoch 20, so a 25-epoch episode
has no plateau to grow into. At 0.05 it reaches its ~80 % knee by epoch 8 (measured, see README)."""
_CIFAR_NORM: Normalization = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))


class HostFactory(Protocol):
    """Builds a fresh host; `width` multiplies its channel widths (CNN) or model width (transformer)."""

    def __call__(self, width: float = 1.0) -> nn.Module: ...


def scaled(value: int, width: float, multiple: int = 1) -> int:
    """`value · width` rounded to the nearest positive multiple of `multiple`."""
    return max(multiple, multiple * round(value * width / multiple))


def _cnn_task(name: str, loader: Loader, channels: tuple[int, ...], in_channels: int, size: int,
              target_loss: float, normalization: Normalization | None, host_optimizer: OptimizerSpec = _CNN_SGD
              ) -> TaskSpec:
    def host(width: float = 1.0) -> nn.Module:
        return CNNHost(in_channels=in_channels, num_classes=10, channels=tuple(scaled(c, width) for c in channels))

    return TaskSpec(
        name=name, topology="cnn", task_type="classification", num_outputs=10,
        input_shape=(in_channels, size, size),
        host_factory=host,
        loader=loader, host_optimizer=host_optimizer, seed_optimizer=_SEED_SGD, target_loss=target_loss,
        typical_loss_delta_std=0.05, default_batch_size=DEFAULT_BATCH_SIZE_TRAINING, val_batch_size=512,
        augment=Augmentation.for_image_size(size), normalization=normalization,
    )


def _transformer_host(*, n_embd: int, n_layer: int, block_size: int, dropout: float) -> HostFactory:
    """A GPT host factory; width scales d_model (and so the 4·d_model MLP), kept divisible by the 4 heads."""

    def host(width: float = 1.0) -> nn.Module:
        return TransformerHost(vocab_size=VOCAB_SIZE, n_embd=scaled(n_embd, width, 4), n_head=4, n_layer=n_layer,
                               block_size=block_size, dropout=dropout)

    return host


TASKS: dict[str, TaskSpec] = {
    "synthetic": _cnn_task("synthetic", _synthetic, (8, 16, 32), 3, 32, 0.5, None, host_optimizer=_SYNTHETIC_SGD),
    "cifar10": _cnn_task("cifar10", _cifar10, (8, 16, 32), 3, 32, 0.3, _CIFAR_NORM),
    "cifar10_deep": _cnn_task("cifar10_deep", _cifar10, (8, 16, 32, 64, 128), 3, 32, 0.3, _CIFAR_NORM),
    "fashion_mnist": _cnn_task("fashion_mnist", _fashion_mnist, (8, 16, 32), 1, 28, 0.25, ((0.2860,), (0.3530,))),
    "tinystories": TaskSpec(
        name="tinystories", topology="transformer", task_type="lm", num_outputs=VOCAB_SIZE, input_shape=(256,),
        host_factory=_transformer_host(n_embd=256, n_layer=6, block_size=256, dropout=DEFAULT_DROPOUT),
        loader=_tinystories,
        host_optimizer=OptimizerSpec("adamw", lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1),
        seed_optimizer=OptimizerSpec("adamw", lr=3e-4, weight_decay=0.0),
        target_loss=1.2, typical_loss_delta_std=0.15, default_batch_size=32, val_batch_size=64,
        lifecycle=_LM_LIFECYCLE, block_size=256,
    ),
    "synthetic_text": TaskSpec(
        name="synthetic_text", topology="transformer", task_type="lm", num_outputs=VOCAB_SIZE, input_shape=(64,),
        host_factory=_transformer_host(n_embd=64, n_layer=3, block_size=64, dropout=0.0),
        loader=_synthetic_text,
        host_optimizer=OptimizerSpec("adamw", lr=1e-3),
        seed_optimizer=OptimizerSpec("adamw", lr=1e-3),
        target_loss=0.6, typical_loss_delta_std=0.15, default_batch_size=32, val_batch_size=64,
        lifecycle=_LM_LIFECYCLE, block_size=64,
    ),
}


def data_source(task: str, options: DataOptions) -> str:
    """Where a task's data comes from, as runs record it (Fashion-MNIST may come from the system's directory when
    --data-dir has none)."""
    if task == "fashion_mnist":
        found = fashion_mnist_directory(options.data_dir)
        return str(found) if found is not None else f"{options.data_dir / 'fashion-mnist'} (missing)"
    if task.startswith("cifar10"):
        return str(options.data_dir / "cifar-10-batches-py")
    if task == "tinystories":
        return str(options.data_path or options.data_dir / "tinystories")
    return "generated in memory"


def get_task_spec(name: str) -> TaskSpec:
    key = name.lower()
    if key not in TASKS:
        raise UserInputError(f"Unknown task '{name}'. Available: {sorted(TASKS)}")
    return TASKS[key]


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
