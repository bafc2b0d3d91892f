"""Image classification on your own images and labels, without code: `--task npz:PATH.npz` or `--task folder:DIR`.

Both become `arrays_task`s, whose class count, channels and image size are read from the data:
* `npz:PATH.npz`: arrays `x_train`, `y_train`, `x_test`, `y_test` (and optionally `x_val`, `y_val`). Images are
  (N, H, W), (N, C, H, W) or (N, H, W, C) with C = 1 or 3, uint8 (0-255) or float; labels are integers 0 … K−1.
* `folder:DIR`: `DIR/train/<class>/*.png` and `DIR/test/<class>/*.png` (optionally `DIR/val/<class>/`), one folder
  per class (the sorted folder names are the classes 0 … K−1), images of one size, read with Pillow.
Without a validation split, `val` is the last tenth of the training samples, as the built-in tasks carve theirs from
the official training data; `test` is scored once per final model, like every task's. Each channel is normalized
with the training split's mean and standard deviation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from esper.leyline.errors import UserInputError
from esper.runtime.readers import SPLITS, DatasetFormatError, Split, carve_split
from esper.runtime.task_registry import register_task_form
from esper.runtime.task_spec import DataOptions, TaskSpec, image_task

__all__ = ["VAL_FRACTION", "arrays_task", "read_folder", "read_npz"]

VAL_FRACTION = 0.1
"""The share of the training samples carved off as `val` when the data brings no validation split."""
_FOLDER_SPLITS = ("train", "val", "test")
_IMAGE_SUFFIXES = (".png",)

Arrays = Mapping[str, Any]
"""`x_train`, `y_train`, `x_test`, `y_test` and optionally `x_val`, `y_val`: numpy arrays or tensors."""


def arrays_task(name: str, arrays: Arrays | Callable[[], Arrays], *, source: str | None = None,
                **options: Any) -> TaskSpec:
    """An image-classification task on arrays in the `npz:` layout (or a function returning them), its class count,
    channels and image size read from the data; `options` go to `image_task` (channels, augment, ...)."""
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
    scale = 255.0 if x_train.dtype == torch.uint8 else 1.0
    pixels = x_train.float().div(scale).transpose(0, 1).reshape(image_shape[0], -1)
    std = pixels.std(dim=1).clamp_min(1e-6)
    normalization = (tuple(pixels.mean(dim=1).tolist()), tuple(std.tolist()))

    def load(_options: DataOptions, split: Split, _block: int) -> tuple[torch.Tensor, torch.Tensor]:
        return splits[split]

    return image_task(name, load, image_shape=image_shape, num_classes=num_classes, normalization=normalization,
                      source=source, **options)


def _splits(arrays: Arrays, where: str) -> dict[Split, tuple[torch.Tensor, torch.Tensor]]:
    """The three splits as (images (N, C, H, W), int64 labels), checked, `val` carved from `train` if absent."""
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
    if "val" not in splits:
        x, y = splits["train"]
        val_size = max(1, round(VAL_FRACTION * len(y)))
        if len(y) <= val_size:
            raise DatasetFormatError(f"{where}: {len(y)} training samples cannot spare a validation split; give at "
                                     f"least 2, or x_val and y_val")
        splits = {"train": carve_split(x, y, "train", val_size), "val": carve_split(x, y, "val", val_size),
                  "test": splits["test"]}
    return splits


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


def read_folder(root: Path) -> dict[str, np.ndarray]:
    """`root/<split>/<class>/*.png` as arrays in the `npz:` layout (classes: the sorted folder names of train)."""
    from PIL import Image  # Pillow comes with matplotlib, one of esper's dependencies

    if not (root / "train").is_dir() or not (root / "test").is_dir():
        raise UserInputError(f"folder:{root}: needs {root / 'train'} and {root / 'test'}, each with one folder of "
                             f".png images per class")
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    arrays: dict[str, np.ndarray] = {}
    for split in (s for s in _FOLDER_SPLITS if (root / s).is_dir()):
        unknown = sorted(p.name for p in (root / split).iterdir() if p.is_dir() and p.name not in classes)
        if unknown:
            raise DatasetFormatError(f"folder:{root}: {split}/ has classes {unknown} that train/ lacks; give every "
                                     f"class training images")
        files = [(path, label) for label, name in enumerate(classes)
                 for path in sorted((root / split / name).glob("*")) if path.suffix.lower() in _IMAGE_SUFFIXES]
        if not files:
            raise DatasetFormatError(f"folder:{root}: {split}/ holds no .png images in class folders")
        images = []
        for path, _ in files:
            try:
                with Image.open(path) as image:
                    images.append(np.asarray(image.convert("L" if image.mode in ("1", "L", "I", "I;16") else "RGB")))
            except OSError as exc:  # Pillow's UnidentifiedImageError and truncated files are OSErrors
                raise DatasetFormatError(f"folder:{root}: {path} is not a readable PNG image ({exc}); replace or "
                                         f"remove it") from None
        shapes = {image.shape for image in images}
        if len(shapes) != 1:
            raise DatasetFormatError(f"folder:{root}: {split}/ mixes image sizes {sorted(shapes)[:3]}; resize them to "
                                     f"one size")
        arrays[f"x_{split}"] = np.stack(images)
        arrays[f"y_{split}"] = np.array([label for _, label in files], dtype=np.int64)
    return arrays


@register_task_form("npz", usage="npz:PATH.npz", summary="your images and labels as arrays in an .npz file")
def _npz_task(argument: str) -> TaskSpec:
    path = Path(argument)
    return arrays_task(f"npz:{argument}", lambda: read_npz(path), source=str(path))


@register_task_form("folder", usage="folder:DIR", summary="your images as PNGs, one folder per class and split")
def _folder_task(argument: str) -> TaskSpec:
    root = Path(argument)
    return arrays_task(f"folder:{argument}", lambda: read_folder(root), source=str(root))
