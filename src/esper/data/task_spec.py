"""What a task is: its host, its data, optimizers, loss scales and lifecycle thresholds (`TaskSpec`), and the helper
that builds an image-classification task on the CNN host from the shape of its data (`image_task`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Protocol

import torch
from torch import nn

from esper.data.augment import Augment, parse_augment
from esper.data.batches import Augmentation, DeviceDataset, Normalization
from esper.data.optim import OptimizerSpec
from esper.data.readers import Split, TokenWindows
from esper.kasmina.blueprints import DEFAULT_REGISTRY
from esper.kasmina.hosts import CNNHost
from esper.kasmina.state import LifecycleConfig
from esper.leyline.actions import ActionSpace
from esper.leyline.constants import DEFAULT_BATCH_SIZE_TRAINING, DEFAULT_HOST_LR, DEFAULT_SEED_LR
from esper.leyline.errors import UserInputError
from esper.leyline.strict_config import StrictConfig

__all__ = ["CNN_SGD", "SEED_SGD", "DataOptions", "HostFactory", "Loader", "TaskSpec", "TaskType", "image_task",
           "scaled"]

TaskType = Literal["classification", "lm"]
LOADER_VAL = "the task's loader's own"
"""Where a task's `val` comes from when the task does not say: its loader returns it."""


class DataOptions(StrictConfig):
    """Where a run's data comes from (CLI: --data-dir, --data-path, --download)."""

    KIND: ClassVar[str] = "data options"

    data_dir: Path = Path("data")
    data_path: Path | None = None
    download: bool = False


Loader = Callable[[DataOptions, Split, int], "tuple[torch.Tensor, torch.Tensor] | TokenWindows"]
"""`loader(options, split, block_size)`: a whole split as CPU tensors (images (N, C, H, W) uint8 or float and int64
labels), or token windows for a language-model task."""


class HostFactory(Protocol):
    """Builds a fresh host; `width` multiplies its channel widths (CNN) or model width (transformer)."""

    def __call__(self, width: float = 1.0) -> nn.Module: ...


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
    augment: Augment = "none"  # the task's own train-time augmentation: what a run uses unless it chooses another
    normalization: Normalization | None = None
    source: str | None = None  # where the data comes from, as runs record it (None: the built-in readers say)
    val_split: str = LOADER_VAL  # where `val` comes from, as runs record it

    @property
    def action_space(self) -> ActionSpace:
        """What controllers may do in this task's episodes: its topology's registered blueprints."""
        return DEFAULT_REGISTRY.action_space(self.topology)

    @property
    def random_guess_loss(self) -> float:
        """Loss of a uniform prediction: ln(classes) or ln(vocabulary)."""
        return math.log(self.num_outputs)

    def augment_in_force(self, choice: Augment | None) -> Augment:
        """The augmentation a run trains with: its `choice`, or (None) the task's own."""
        augment = self.augment if choice is None else choice
        if augment != "none" and len(self.input_shape) != 3:
            raise UserInputError(f"Task '{self.name}' has no images to augment ({augment}): drop --augment (or pass "
                                 f"--augment none)")
        return augment

    def augmentation(self, choice: Augment | None) -> Augmentation | None:
        """What `augment_in_force(choice)` does to this task's images (None: nothing)."""
        augment = self.augment_in_force(choice)
        return None if augment == "none" else Augmentation.named(augment, min(self.input_shape[1:]))

    def load(self, options: DataOptions, split: Split) -> tuple[torch.Tensor, torch.Tensor] | TokenWindows:
        """CPU tensors of a whole split; raises DatasetNotFoundError when absent."""
        return self.loader(options, split, self.block_size or 0)

    def dataset(self, options: DataOptions, split: Split, device: torch.device | str) -> DeviceDataset:
        data = self.load(options, split)
        if isinstance(data, TokenWindows):
            return DeviceDataset.from_windows(data, device)
        inputs, targets = data
        return DeviceDataset(inputs, targets, device, self.normalization)


CNN_SGD = OptimizerSpec(name="sgd", lr=DEFAULT_HOST_LR, momentum=0.9, weight_decay=5e-4)
SEED_SGD = OptimizerSpec(name="sgd", lr=DEFAULT_SEED_LR, momentum=0.9)
CNN_CHANNELS = (8, 16, 32)
"""The small CNN host every image task trains by default: three blocks, a slot after each."""


def scaled(value: int, width: float, multiple: int = 1) -> int:
    """`value · width` rounded to the nearest positive multiple of `multiple`."""
    return max(multiple, multiple * round(value * width / multiple))


def image_task(name: str, loader: Loader, *, image_shape: tuple[int, int, int], num_classes: int,
               channels: tuple[int, ...] = CNN_CHANNELS, target_loss: float = 0.3,
               normalization: Normalization | None = None, host_optimizer: OptimizerSpec = CNN_SGD,
               augment: str = "none", source: str | None = None, val_split: str = LOADER_VAL) -> TaskSpec:
    """An image-classification task on the CNN host, shaped by its data: `image_shape` (C, H, W) and `num_classes` as
    the data has them, at any size (a block halves the resolution only while it is at least 2 pixels).

    `channels`: one conv block per entry (its width × the host's width multiplier). `augment`: the task's own
    train-time augmentation, `none` (the default: a flip or a crop may change a label), `crop` (random crops padding
    an eighth of the image side; 4 at 32 px, 2 at 28), `flip` (random horizontal flips) or `crop,flip`; a run may
    choose another (`--augment`). `target_loss` scales the `loss` reward family only. `source` and `val_split` say
    where the data and its validation split come from, as runs record them.
    """
    in_channels, side = image_shape[0], min(image_shape[1:])
    if min(image_shape) < 1 or num_classes < 2:
        raise UserInputError(f"Task '{name}': images of shape {image_shape} with {num_classes} classes cannot be "
                             f"learned; give images of at least 1×1 pixels and labels of at least 2 classes")
    pool = tuple(side >> i >= 2 for i in range(len(channels)))

    def host(width: float = 1.0) -> nn.Module:
        return CNNHost(in_channels=in_channels, num_classes=num_classes, pool=pool,
                       channels=tuple(scaled(c, width) for c in channels))

    return TaskSpec(
        name=name, topology="cnn", task_type="classification", num_outputs=num_classes, input_shape=image_shape,
        host_factory=host, loader=loader, host_optimizer=host_optimizer, seed_optimizer=SEED_SGD,
        target_loss=target_loss, typical_loss_delta_std=0.05, default_batch_size=DEFAULT_BATCH_SIZE_TRAINING,
        val_batch_size=512, augment=parse_augment(augment), normalization=normalization, source=source,
        val_split=val_split,
    )
