"""Image classification on your own images and labels, without code: `--task npz:PATH.npz` or `--task folder:DIR`.

Both become `arrays_task`s, whose class count, channels and image size are read from the data:
* `npz:PATH.npz`: arrays `x_train`, `y_train`, `x_test`, `y_test` (and optionally `x_val`, `y_val`). Images are
  (N, H, W), (N, C, H, W) or (N, H, W, C) with C = 1 or 3, uint8 (0-255) or float; labels are integers 0 … K−1.
* `folder:DIR`: `DIR/train/<class>/*.png` and `DIR/test/<class>/*.png` (optionally `DIR/val/<class>/`), one folder
  per class (the sorted folder names are the classes 0 … K−1), images of one size (`esper.data.image_folders`).
Without a validation split, `val` is carved from `train` class by class: a tenth of every class, drawn at random with
a fixed seed (`stratified_val`), so it holds every class in proportion however the files are ordered (a folder
reads class after class; many arrays are sorted by label), and it is the same for every controller, worker, resume
and run. A validation split without every class of `train` is refused. `test` is scored once per final model, like
every task's. Each channel is normalized with the training split's mean and standard deviation. Training batches are
not augmented unless the task (`augment=`) or the run (`--augment`) says so: a flip or a crop may change a label.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from esper.data.image_folders import read_folder
from esper.data.readers import SPLITS, DatasetFormatError, Split
from esper.data.task_registry import register_task_form
from esper.data.task_spec import DataOptions, TaskSpec, image_task
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed

__all__ = ["VAL_FRACTION", "VAL_SEED", "arrays_task", "read_npz", "stratified_val"]

VAL_FRACTION = 0.1
"""The share of every class of the training samples carved off as `val` when the data brings no validation split."""
VAL_SEED = 0
"""The seed of that carve: fixed, so the carve is a function of the data alone."""
CARVED_VAL = (f"carved from train: a stratified random {VAL_FRACTION:.0%} of every class (at least one sample), "
              f"seed {VAL_SEED}")

Arrays = Mapping[str, Any]
"""`x_train`, `y_train`, `x_test`, `y_test` and optionally `x_val`, `y_val`: numpy arrays or tensors."""


def arrays_task(name: str, arrays: Arrays | Callable[[], Arrays], *, source: str | None = None,
                **options: Any) -> TaskSpec:
    """An image-classification task on arrays in the `npz:` layout (or a function returning them), its class count,
    channels and image size read from the data; `options` go to `image_task` (channels, `augment`: none unless
    given, ...)."""
    where = source or f"task '{name}'"
    given = arrays() if callable(arrays) else arrays
    splits = _splits(given, where)
    x_train, y_train = splits["train"]
    image_shape = (int(x_train.shape[1]), int(x_train.shape[2]), int(x_train.shape[3]))
    num_classes = int(max(int(y.max()) for _, y in splits.values())) + 1
    missing = sorted(set(range(num_classes)) - set(y_train.unique().tolist()))
    if missing:
        raise DatasetFormatError(f"{where}: labels run 0…{num_classes - 1} but the training split has no sample of "
                                 f"class(es) {missing[:10]}; number the classes 0…K−1 with every class in training")
    val_split = "given (x_val, y_val)"
    if "val" in splits:
        _check_val(splits["val"][1], num_classes, where)
    else:
        splits["train"], splits["val"] = stratified_val(x_train, y_train, where)
        val_split = CARVED_VAL
    scale = 255.0 if x_train.dtype == torch.uint8 else 1.0
    pixels = x_train.float().div(scale).transpose(0, 1).reshape(image_shape[0], -1)
    std = pixels.std(dim=1).clamp_min(1e-6)
    normalization = (tuple(pixels.mean(dim=1).tolist()), tuple(std.tolist()))

    def load(_options: DataOptions, split: Split, _block: int) -> tuple[torch.Tensor, torch.Tensor]:
        return splits[split]

    return image_task(name, load, image_shape=image_shape, num_classes=num_classes, normalization=normalization,
                      source=source, val_split=val_split, **options)


def _splits(arrays: Arrays, where: str) -> dict[Split, tuple[torch.Tensor, torch.Tensor]]:
    """The given splits as (images (N, C, H, W), int64 labels), checked: `train`, `test` and perhaps `val`."""
    required = ("x_train", "y_train", "x_test", "y_test")
    absent = [k for k in required if k not in arrays]
    if absent or (("x_val" in arrays) != ("y_val" in arrays)):
        raise DatasetFormatError(f"{where}: needs arrays {', '.join(required)} (and x_val with y_val, or neither); "
                                 f"missing {absent or ['x_val or y_val']}, found {sorted(arrays)}")
    names: tuple[Split, ...] = SPLITS if "x_val" in arrays else ("train", "test")
    splits = {split: (_images(arrays[f"x_{split}"], f"{where}: x_{split}"),
                      _labels(arrays[f"y_{split}"], f"{where}: y_{split}")) for split in names}
    for split, (x, y) in splits.items():
        if len(x) != len(y) or len(y) == 0:
            raise DatasetFormatError(f"{where}: x_{split} holds {len(x)} images and y_{split} {len(y)} labels; give "
                                     f"each split at least one image and one label per image")
        if x.shape[1:] != splits["train"][0].shape[1:] or x.dtype != splits["train"][0].dtype:
            raise DatasetFormatError(f"{where}: x_{split} is {x.dtype} {tuple(x.shape[1:])} but x_train is "
                                     f"{splits['train'][0].dtype} {tuple(splits['train'][0].shape[1:])}; give every "
                                     f"split images of one shape and dtype")
    return splits


def stratified_val(images: torch.Tensor, labels: torch.Tensor, where: str
                   ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """(train, val) carved from training samples: of each class, `VAL_FRACTION` of its samples (rounded, at least
    one) drawn at random from a seed of `VAL_SEED` and the class. Both keep the samples' order. The draw depends on
    the data alone, never on the process, so every controller, worker, resume and run sees the same split."""
    chosen = torch.zeros(len(labels), dtype=torch.bool)
    for label in labels.unique().tolist():
        members = (labels == label).nonzero().flatten()
        if len(members) < 2:
            raise DatasetFormatError(f"{where}: class {label} has 1 training sample, and a validation split carved "
                                     f"from train takes at least one sample of every class while leaving one to train "
                                     f"on; give class {label} more training samples, or give x_val and y_val")
        take = max(1, round(VAL_FRACTION * len(members)))
        generator = torch.Generator().manual_seed(derive_seed(VAL_SEED, "val", label))
        order = torch.randperm(len(members), generator=generator)
        chosen[members[order[:take]]] = True
    return (images[~chosen], labels[~chosen]), (images[chosen], labels[chosen])


def _check_val(labels: torch.Tensor, num_classes: int, where: str) -> None:
    """A validation split must hold every class: one without a class scores controllers on the other classes only."""
    missing = sorted(set(range(num_classes)) - set(labels.unique().tolist()))
    if missing:
        raise DatasetFormatError(f"{where}: the validation split has no sample of class(es) {missing[:10]}, which "
                                 f"train has; give x_val and y_val samples of every class, or leave both out to have "
                                 f"one carved from train")


def _images(value: Any, where: str) -> torch.Tensor:
    """(N, C, H, W) uint8 or float32 images from (N, H, W), (N, C, H, W) or (N, H, W, C) with C in {1, 3}."""
    x = torch.as_tensor(np.asarray(value))
    if x.dtype != torch.uint8:
        if not x.is_floating_point():
            raise DatasetFormatError(f"{where}: images are {x.dtype}; give uint8 (0-255) or float pixels")
        x = x.float()
        if not bool(torch.isfinite(x).all()):
            raise DatasetFormatError(f"{where}: holds NaN or infinite pixels")
    if x.dim() == 3:
        x = x.unsqueeze(1)
    elif x.dim() == 4 and x.shape[1] not in (1, 3) and x.shape[3] in (1, 3):
        x = x.permute(0, 3, 1, 2)
    if x.dim() != 4 or x.shape[1] not in (1, 3):
        raise DatasetFormatError(f"{where} has shape {tuple(x.shape)}; give images as (N, H, W), (N, C, H, W) or "
                                 f"(N, H, W, C) with 1 or 3 channels")
    return x.contiguous()


def _labels(value: Any, where: str) -> torch.Tensor:
    y = np.asarray(value)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DatasetFormatError(f"{where} is {y.dtype} of shape {y.shape}; give one integer class label per image")
    if len(y) and int(y.min()) < 0:
        raise DatasetFormatError(f"{where} holds negative labels; number the classes 0…K−1")
    return torch.from_numpy(y.astype(np.int64))


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an `.npz` file (no pickled objects)."""
    if not path.is_file():
        raise UserInputError(f"npz:{path}: no such file; pass the path of an .npz file holding x_train, y_train, "
                             f"x_test and y_test")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError) as exc:
        raise DatasetFormatError(f"npz:{path}: not a readable .npz file ({exc}); write it with numpy.savez") from exc


@register_task_form("npz", usage="npz:PATH.npz", summary="your images and labels as arrays in an .npz file")
def _npz_task(argument: str) -> TaskSpec:
    path = Path(argument)
    return arrays_task(f"npz:{argument}", lambda: read_npz(path), source=str(path))


@register_task_form("folder", usage="folder:DIR", summary="your images as PNGs, one folder per class and split")
def _folder_task(argument: str) -> TaskSpec:
    root = Path(argument)
    return arrays_task(f"folder:{argument}", lambda: read_folder(root), source=str(root))
