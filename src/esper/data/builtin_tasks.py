"""esper's own tasks, registered through `register_task` exactly as a plugin's are.

Each image task declares the shape and class count its data format defines (the readers check them); a task on
files of your own (`npz:PATH`, `folder:DIR`) reads them from the data (`esper.data.array_tasks`).
"""

from __future__ import annotations

import torch
from torch import nn

from esper.data.batches import Normalization
from esper.data.optim import OptimizerSpec
from esper.data.readers import (
    CIFAR10_CLASSES,
    CIFAR10_IMAGE_SHAPE,
    CIFAR10_VAL_SIZE,
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_IMAGE_SHAPE,
    FASHION_MNIST_VAL_SIZE,
    VOCAB_SIZE,
    Split,
    TokenWindows,
    download_cifar10,
    load_cifar10,
    load_fashion_mnist,
    load_tinystories,
)
from esper.data.synthetic import IMAGE_SIZE, TEXTURE_PAIRS, generate_synthetic_images, load_synthetic_text
from esper.data.task_registry import register_task
from esper.data.task_spec import DataOptions, HostFactory, TaskSpec, image_task, scaled
from esper.kasmina.hosts import TransformerHost
from esper.kasmina.state import LifecycleConfig
from esper.leyline.constants import DEFAULT_DROPOUT

__all__ = ["SYNTHETIC_DATA_SEED"]

SYNTHETIC_DATA_SEED = 0
"""The synthetic tasks are one fixed dataset each: the data seed is part of the task, not of the run."""

_LM_LIFECYCLE = LifecycleConfig(min_training_epochs=5)
_SYNTHETIC_SGD = OptimizerSpec(name="sgd", lr=0.05, momentum=0.9, weight_decay=5e-4)
"""At lr 0.01 the host on `synthetic` is still climbing at epoch 20, so a 25-epoch episode
has no plateau to grow into. At 0.05 it reaches its ~80 % knee by epoch 8 (measured, see README)."""
_CIFAR_NORM: Normalization = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
_FASHION_NORM: Normalization = ((0.2860,), (0.3530,))
_PHOTO_AUGMENT = "crop,flip"
"""Textures, photographs and clothing keep their class under a small shift and a mirror image."""
_CIFAR_VAL = f"the last {CIFAR10_VAL_SIZE:,} training images (the files' order, already shuffled)"
_GENERATED_VAL = "its generator's own val split"


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


@register_task("synthetic")
def _synthetic_task() -> TaskSpec:
    return image_task("synthetic", _synthetic, image_shape=(3, IMAGE_SIZE, IMAGE_SIZE), num_classes=len(TEXTURE_PAIRS),
                      target_loss=0.5, host_optimizer=_SYNTHETIC_SGD, augment=_PHOTO_AUGMENT,
                      source="generated in memory", val_split=_GENERATED_VAL)


@register_task("cifar10")
def _cifar10_task() -> TaskSpec:
    return image_task("cifar10", _cifar10, image_shape=CIFAR10_IMAGE_SHAPE, num_classes=CIFAR10_CLASSES,
                      normalization=_CIFAR_NORM, augment=_PHOTO_AUGMENT, val_split=_CIFAR_VAL)


@register_task("cifar10_deep")
def _cifar10_deep_task() -> TaskSpec:
    return image_task("cifar10_deep", _cifar10, image_shape=CIFAR10_IMAGE_SHAPE, num_classes=CIFAR10_CLASSES,
                      channels=(8, 16, 32, 64, 128), normalization=_CIFAR_NORM, augment=_PHOTO_AUGMENT,
                      val_split=_CIFAR_VAL)


@register_task("fashion_mnist")
def _fashion_mnist_task() -> TaskSpec:
    return image_task("fashion_mnist", _fashion_mnist, image_shape=FASHION_MNIST_IMAGE_SHAPE,
                      num_classes=FASHION_MNIST_CLASSES, target_loss=0.25, normalization=_FASHION_NORM,
                      augment=_PHOTO_AUGMENT,
                      val_split=f"the last {FASHION_MNIST_VAL_SIZE:,} training images (the file's order, already "
                                "shuffled)")


def _transformer_host(*, n_embd: int, n_layer: int, block_size: int, dropout: float) -> HostFactory:
    """A GPT host factory; width scales d_model (and so the 4·d_model MLP), kept divisible by the 4 heads."""

    def host(width: float = 1.0) -> nn.Module:
        return TransformerHost(vocab_size=VOCAB_SIZE, n_embd=scaled(n_embd, width, 4), n_head=4, n_layer=n_layer,
                               block_size=block_size, dropout=dropout)

    return host


@register_task("tinystories")
def _tinystories_task() -> TaskSpec:
    return TaskSpec(
        name="tinystories", topology="transformer", task_type="lm", num_outputs=VOCAB_SIZE, input_shape=(256,),
        host_factory=_transformer_host(n_embd=256, n_layer=6, block_size=256, dropout=DEFAULT_DROPOUT),
        loader=_tinystories,
        host_optimizer=OptimizerSpec(name="adamw", lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1),
        seed_optimizer=OptimizerSpec(name="adamw", lr=3e-4, weight_decay=0.0),
        target_loss=1.2, typical_loss_delta_std=0.15, default_batch_size=32, val_batch_size=64,
        lifecycle=_LM_LIFECYCLE, block_size=256,
        val_split="the last 5 % of the training stories (of a single --data-path file: the 5 % before the test "
                  "split's)",
    )


@register_task("synthetic_text")
def _synthetic_text_task() -> TaskSpec:
    return TaskSpec(
        name="synthetic_text", topology="transformer", task_type="lm", num_outputs=VOCAB_SIZE, input_shape=(64,),
        host_factory=_transformer_host(n_embd=64, n_layer=3, block_size=64, dropout=0.0),
        loader=_synthetic_text,
        host_optimizer=OptimizerSpec(name="adamw", lr=1e-3),
        seed_optimizer=OptimizerSpec(name="adamw", lr=1e-3),
        target_loss=0.6, typical_loss_delta_std=0.15, default_batch_size=32, val_batch_size=64,
        lifecycle=_LM_LIFECYCLE, block_size=64, source="generated in memory", val_split=_GENERATED_VAL,
    )
