"""The task of each instance type of a family: `--task family:KEY/TYPE`.

A type's task is its base task's data, restricted to the type's first classes and corrupted image by image, on the
base task's CNN host scaled to the type's width (so `static:2` on a width-0.5 type trains width 1.0). Each image is
corrupted from its own seed, `derive_seed(family key, type, split, index in the base split)`: the same image is
corrupted the same way whichever subset an episode draws, on any machine and in any worker.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
from torch import Tensor, nn

from esper.data.builtin_tasks import SYNTHETIC_DATA_SEED
from esper.data.corruptions import corrupt
from esper.data.families import FAMILY_PREFIX, Family, InstanceType, family_task, get_family
from esper.data.readers import SPLITS, Split, TokenWindows
from esper.data.synthetic import generate_synthetic_images
from esper.data.task_registry import TASKS, register_task_form
from esper.data.task_spec import DataOptions, TaskSpec, image_task
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed

__all__ = ["instance_images", "instance_task"]

_CHUNK = 2048
"""Images corrupted per call: bounds the memory of the per-image kernels and grids."""


def instance_images(family: Family, itype: InstanceType, split: Split, images: Tensor, labels: Tensor
                    ) -> tuple[Tensor, Tensor]:
    """A base split as the type sees it: its first `classes` classes only, each image corrupted from its own seed.
    uint8 images are corrupted on the [0, 1] scale and stored as uint8 again (clipped, as MNIST-C's files are)."""
    index = torch.arange(len(labels))
    if itype.classes is not None:
        keep = labels < itype.classes
        images, labels, index = images[keep], labels[keep], index[keep]
    if itype.corruption is None:
        return images, labels
    name, severity = itype.corruption
    seeds = [derive_seed(family.key, itype.name, split, i) for i in index.tolist()]
    stored_as_bytes = images.dtype == torch.uint8
    chunks = []
    for start in range(0, len(images), _CHUNK):
        x = images[start:start + _CHUNK]
        x = x.float().div(255.0) if stored_as_bytes else x.float()
        x = corrupt(x, name, severity, seeds[start:start + _CHUNK])
        chunks.append(x.clamp(0.0, 1.0).mul(255.0).round().to(torch.uint8) if stored_as_bytes else x)
    return (torch.cat(chunks) if chunks else images), labels


@functools.lru_cache(maxsize=2 * len(SPLITS))
def _synthetic(split: Split, jitter: bool) -> tuple[Tensor, Tensor]:
    """The synthetic split, generated once per process for all the types built on it (never modified in place)."""
    return generate_synthetic_images(SYNTHETIC_DATA_SEED, split, jitter=jitter)


def _base_split(itype: InstanceType, options: DataOptions, split: Split) -> tuple[Tensor, Tensor]:
    if itype.task == "synthetic":
        return _synthetic(split, itype.jitter)
    data = TASKS[itype.task].load(options, split)
    assert not isinstance(data, TokenWindows), "family types build on image tasks"
    return data


def instance_task(family: Family, itype: InstanceType) -> TaskSpec:
    """The type's task: its base task's data through `instance_images`, on the base host at the type's width."""
    base = TASKS[itype.task]

    def load(options: DataOptions, split: Split, _block: int) -> tuple[Tensor, Tensor]:
        images, labels = _base_split(itype, options, split)
        return instance_images(family, itype, split, images, labels)

    shape = base.input_shape
    spec = image_task(family_task(family, itype), load, image_shape=(shape[0], shape[1], shape[2]),
                      num_classes=itype.classes or base.num_outputs, target_loss=base.target_loss,
                      normalization=base.normalization, host_optimizer=base.host_optimizer,
                      augment=base.augment, source=f"{itype.describe()} (family {family.key})",
                      val_split=base.val_split)
    host_at = spec.host_factory

    def host(width: float = 1.0) -> nn.Module:
        return host_at(width * itype.width)

    return dataclasses.replace(spec, host_factory=host)


@register_task_form(FAMILY_PREFIX, usage=f"{FAMILY_PREFIX}:FAMILY/TYPE",
                    summary="an instance type of a task family (esper study --family)")
def _family_task(argument: str) -> TaskSpec:
    key, sep, type_name = argument.partition("/")
    if not sep:
        raise UserInputError(f"Task '{FAMILY_PREFIX}:{argument}' names no type: write {FAMILY_PREFIX}:FAMILY/TYPE")
    family = get_family(key)
    return instance_task(family, family.type(type_name))
