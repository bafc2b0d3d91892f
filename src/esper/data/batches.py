"""Device-resident datasets, on-device augmentation and the batch iterator shared by every env.

Data is moved to each training device once; each batch is gathered, augmented and normalized once per device and
then shared by every env on that device. Sample order and augmentation parameters are drawn on CPU from one
generator per epoch, so every device sees identical batches.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch
from torch import Tensor

from esper.data.augment import Augment, augment_ops
from esper.data.readers import TokenWindows
from esper.leyline.errors import UserInputError

Normalization = tuple[Sequence[float], Sequence[float]]
"""Per-channel (mean, std) applied after scaling uint8 images to [0, 1]."""

_CROP_PADDING_BY_SIZE = {32: 4, 28: 2}

K = TypeVar("K", bound=Hashable)
"""Consumer key of a shared batch, usually a device string such as "cuda:0"."""


@dataclass(frozen=True)
class AugmentDraw:
    """Crop offsets (B, 2) as (dy, dx) in [0, 2·padding] and flip flags (B,) for one batch, drawn once on CPU."""

    padding: int
    offsets: Tensor
    flips: Tensor


@dataclass(frozen=True)
class Augmentation:
    """Train-time image augmentation: random crop with zero padding (none at padding 0), optional horizontal flip
    (p = 0.5)."""

    crop_padding: int
    horizontal_flip: bool = True

    @classmethod
    def for_image_size(cls, size: int) -> Augmentation:
        """The usual setting for images whose shorter side is `size`: padding 4 for 32×32 (CIFAR), 2 for 28×28
        (MNIST-like), an eighth of the side otherwise (2 for 16×16)."""
        if size < 1:
            raise UserInputError(f"an image side must be >= 1 pixel, got {size}")
        return cls(_CROP_PADDING_BY_SIZE.get(size, size // 8))

    @classmethod
    def named(cls, augment: Augment, size: int) -> Augmentation | None:
        """What `augment` does to images whose shorter side is `size` (crops padded as `for_image_size` pads them);
        None where it does nothing (`none`, or only crops of an image too small to pad)."""
        ops = augment_ops(augment)
        padding = cls.for_image_size(size).crop_padding if "crop" in ops else 0
        return cls(padding, horizontal_flip="flip" in ops) if padding or "flip" in ops else None

    def draw(self, batch_size: int, generator: torch.Generator) -> AugmentDraw:
        """Draw per-sample parameters on CPU so that every device applies the same augmentation (no crop offsets
        are drawn without padding)."""
        if self.crop_padding:
            offsets = torch.randint(0, 2 * self.crop_padding + 1, (batch_size, 2), generator=generator)
        else:
            offsets = torch.zeros(batch_size, 2, dtype=torch.int64)
        if self.horizontal_flip:
            flips = torch.rand(batch_size, generator=generator) < 0.5
        else:
            flips = torch.zeros(batch_size, dtype=torch.bool)
        return AugmentDraw(self.crop_padding, offsets, flips)


def describe_augmentation(augmentation: Augmentation | None) -> str:
    """The augmentation in force as a run records it: `none`, or e.g. `crop (padding 2), flip`."""
    if augmentation is None:
        return "none"
    parts = [f"crop (padding {augmentation.crop_padding})"] if augmentation.crop_padding else []
    return ", ".join([*parts, "flip"] if augmentation.horizontal_flip else parts)


def apply_augmentation(images: Tensor, draw: AugmentDraw) -> Tensor:
    """Crop-with-zero-padding then flip, as one gather over flattened pixels on the images' device.

    Output pixel (i, j) reads source pixel (i + dy − p, j' + dx − p) with j' = W − 1 − j when flipped; sources outside
    the image are the zero padding.
    """
    b, c, h, w = images.shape
    device = images.device
    offsets, flips = draw.offsets.to(device), draw.flips.to(device)
    rows = torch.arange(h, device=device).unsqueeze(0) + offsets[:, :1] - draw.padding
    cols = torch.arange(w, device=device).unsqueeze(0).expand(b, w)
    cols = torch.where(flips.unsqueeze(1), w - 1 - cols, cols) + offsets[:, 1:] - draw.padding
    inside = ((rows >= 0) & (rows < h)).unsqueeze(2) & ((cols >= 0) & (cols < w)).unsqueeze(1)  # (B, H, W)
    source = rows.clamp(0, h - 1).unsqueeze(2) * w + cols.clamp(0, w - 1).unsqueeze(1)  # (B, H, W) flat pixel index
    out = images.reshape(b, c, h * w).gather(2, source.view(b, 1, h * w).expand(b, c, h * w)).view(b, c, h, w)
    return out.masked_fill_(~inside.unsqueeze(1), 0)


class DeviceDataset:
    """One split held on one device.

    Images may be uint8 (scaled to [0, 1] and normalized per batch, keeping device memory at one byte per pixel) or
    float (used as stored; `synthetic` needs no normalization). Tokens are int64. LM validation data may carry one
    shorter `tail` window, served as a batch of its own.
    """

    def __init__(
        self,
        inputs: Tensor,
        targets: Tensor,
        device: torch.device | str,
        normalization: Normalization | None = None,
        *,
        tail: tuple[Tensor, Tensor] | None = None,
    ) -> None:
        if inputs.shape[0] != targets.shape[0]:
            raise UserInputError(f"inputs have {inputs.shape[0]} samples but targets have {targets.shape[0]}")
        if normalization is not None and (inputs.dim() != 4 or len(normalization[0]) != inputs.shape[1]):
            raise UserInputError("normalization needs (N, C, H, W) images and one mean/std per channel")
        if normalization is not None and not (inputs.dtype == torch.uint8 or inputs.is_floating_point()):
            raise UserInputError(f"cannot normalize {inputs.dtype} inputs")
        self.device = torch.device(device)
        self.normalization = normalization
        self.inputs = inputs.to(self.device)
        self.targets = targets.to(self.device)
        self.tail = None if tail is None else (tail[0].to(self.device), tail[1].to(self.device))
        self._mean_std: tuple[Tensor, Tensor] | None = None
        if normalization is not None:
            mean, std = (torch.tensor(v, dtype=torch.float32, device=self.device) for v in normalization)
            self._mean_std = (mean.view(1, -1, 1, 1), std.view(1, -1, 1, 1))

    @classmethod
    def from_windows(cls, windows: TokenWindows, device: torch.device | str) -> DeviceDataset:
        """LM split: full windows plus the optional validation tail."""
        return cls(windows.inputs, windows.targets, device, tail=windows.tail)

    def subset(self, indices: Tensor) -> DeviceDataset:
        """The samples `indices` (CPU int64) as a dataset of their own on the same device (an LM tail is dropped)."""
        index = indices.to(self.device)
        return DeviceDataset(self.inputs[index], self.targets[index], self.device, self.normalization)

    @property
    def num_full(self) -> int:
        """Samples addressable by index (everything except the tail)."""
        return self.inputs.shape[0]

    def __len__(self) -> int:
        return self.num_full + (1 if self.tail is not None else 0)

    def batch(self, indices: Tensor, draw: AugmentDraw | None = None) -> tuple[Tensor, Tensor]:
        """Gather samples `indices` (CPU int64), augment (raw pixel space, so padding is black) and convert."""
        index = indices.to(self.device)
        x = self.inputs[index]
        if draw is not None:
            x = apply_augmentation(x, draw)
        return self._convert(x), self.targets[index]

    def tail_batch(self) -> tuple[Tensor, Tensor]:
        """The shorter final LM window as a batch of one."""
        if self.tail is None:
            raise ValueError("this dataset has no tail window")
        return self.tail

    def _convert(self, x: Tensor) -> Tensor:
        if x.dtype == torch.uint8:
            x = x.float().div_(255.0)
        if self._mean_std is not None:
            mean, std = self._mean_std
            x = (x - mean) / std
        return x


class SharedBatch(Mapping[K, tuple[Tensor, Tensor]]):
    """One batch materialized on every device: key → (x, y); all keys hold the same samples and augmentations."""

    def __init__(self, indices: Tensor, tensors: dict[K, tuple[Tensor, Tensor]]) -> None:
        self.indices = indices
        self._tensors = tensors

    @property
    def size(self) -> int:
        """Number of samples in the batch."""
        return self.indices.numel()

    def __getitem__(self, key: K) -> tuple[Tensor, Tensor]:
        return self._tensors[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


class SharedBatchIterator(Generic[K]):
    """Iterates an epoch of `SharedBatch`es over datasets keyed by consumer (usually one key per device).

    `shuffle=True` is a train iterator: one permutation per epoch from a CPU generator seeded by the current seed (set
    per epoch with `set_seed`, e.g. `derive_seed(seed, b, e)`), and a last partial batch of a single sample is dropped
    (BatchNorm needs ≥ 2). `shuffle=False` is a validation iterator: fixed order, nothing dropped, the LM tail last.
    Augmentation parameters come from the same generator. `materializations` counts batches built per key.
    """

    def __init__(
        self,
        datasets_by_device: Mapping[K, DeviceDataset],
        batch_size: int,
        *,
        shuffle: bool,
        seed: int | None = None,
        augment: Augmentation | None = None,
    ) -> None:
        if not datasets_by_device:
            raise UserInputError("need at least one dataset")
        if batch_size < 1:
            raise UserInputError(f"batch_size must be >= 1, got {batch_size}")
        datasets = list(datasets_by_device.values())
        if len({(d.num_full, d.tail is not None) for d in datasets}) != 1:
            raise ValueError("all datasets of a SharedBatchIterator must hold the same samples")
        if (shuffle or augment is not None) and seed is None:
            raise UserInputError("a seed is required to shuffle or augment")
        if shuffle and datasets[0].tail is not None:
            raise UserInputError("a tail window is served only by a validation (shuffle=False) iterator")
        if augment is not None and datasets[0].inputs.dim() != 4:
            raise UserInputError("augmentation applies only to (N, C, H, W) images")
        self.datasets = dict(datasets_by_device)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.augment = augment
        self.seed = seed
        self.materializations: Counter[K] = Counter()
        self._num_full = datasets[0].num_full
        self._has_tail = datasets[0].tail is not None

    def set_seed(self, seed: int) -> None:
        """Seed of the next epoch's order and augmentations."""
        self.seed = seed

    def _kept(self) -> int:
        """Indexed samples served this epoch: train drops a final single-sample batch."""
        n = self._num_full
        return n - 1 if self.shuffle and n % self.batch_size == 1 else n

    def __len__(self) -> int:
        return -(-self._kept() // self.batch_size) + (1 if self._has_tail else 0)

    def __iter__(self) -> Iterator[SharedBatch[K]]:
        generator = torch.Generator()
        if self.seed is not None:
            generator.manual_seed(self.seed)
        n = self._num_full
        order = torch.randperm(n, generator=generator) if self.shuffle else torch.arange(n)
        kept = self._kept()
        for start in range(0, kept, self.batch_size):
            indices = order[start : min(start + self.batch_size, kept)]
            draw = self.augment.draw(indices.numel(), generator) if self.augment is not None else None
            yield self._materialize(indices, draw, tail=False)
        if self._has_tail:
            yield self._materialize(torch.tensor([n]), None, tail=True)

    def _materialize(self, indices: Tensor, draw: AugmentDraw | None, *, tail: bool) -> SharedBatch[K]:
        tensors: dict[K, tuple[Tensor, Tensor]] = {}
        for key, dataset in self.datasets.items():
            tensors[key] = dataset.tail_batch() if tail else dataset.batch(indices, draw)
            self.materializations[key] += 1
        return SharedBatch(indices, tensors)
