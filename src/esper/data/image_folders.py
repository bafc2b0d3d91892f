"""`folder:DIR`: images in one folder per class and split, read as arrays in the `npz:` layout.

`DIR/train/<class>/` defines the classes (the sorted folder names are 0 … K−1); `DIR/test/` and an optional `DIR/val/`
hold folders of the same names. Whatever would quietly make a run wrong stops it, naming the folder: an empty class
folder, one without images, a `val/` without every class, a class too small to give `val` a sample. Files that are not
images are left out, and counted in one warning.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from esper.data.readers import DatasetFormatError, DataWarning
from esper.leyline.errors import UserInputError

__all__ = ["IMAGE_SUFFIXES", "read_folder"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
"""The files read as images (any case); anything else in a class folder is left out, and counted."""
_SPLITS = ("train", "val", "test")
_READ = ", ".join(IMAGE_SUFFIXES)


def _class_files(root: Path, split: str, name: str, skipped: list[Path]) -> list[Path]:
    """The image files of `root/split/name`, sorted; an empty folder, or one without images, is an error naming it."""
    folder = root / split / name
    entries = sorted(folder.iterdir())
    images = [p for p in entries if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
    if not entries:
        raise DatasetFormatError(f"folder:{root}: {split}/{name} is empty; put class {name}'s images ({_READ}) in it, "
                                 f"or remove the folder")
    if not images:
        more = f" and {len(entries) - 1} more" if len(entries) > 1 else ""
        raise DatasetFormatError(f"folder:{root}: {split}/{name} holds no images (esper reads {_READ} files; it found "
                                 f"{entries[0].name}{more}); put class {name}'s images in it, or remove the folder")
    kept = set(images)
    skipped.extend(p for p in entries if p not in kept)
    return images


def _read_image(root: Path, path: Path) -> np.ndarray:
    from PIL import Image  # Pillow comes with matplotlib, one of esper's dependencies

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("L" if image.mode in ("1", "L", "I", "I;16") else "RGB"))
    except OSError as exc:  # Pillow's UnidentifiedImageError and truncated files are OSErrors
        raise DatasetFormatError(f"folder:{root}: {path} is not a readable image ({exc}); replace or remove it"
                                 ) from None


def _split_files(root: Path, split: str, classes: list[str], skipped: list[Path]) -> list[tuple[Path, int]]:
    """(image file, label) of every image of a split, class by class; `val/` must hold every class."""
    folders = {p.name for p in (root / split).iterdir() if p.is_dir()}
    unknown = sorted(folders - set(classes))
    if unknown:
        raise DatasetFormatError(f"folder:{root}: {split}/ has classes {unknown} that train/ lacks; give every class "
                                 f"training images")
    missing = [name for name in classes if name not in folders]
    if split == "val" and missing:
        raise DatasetFormatError(f"folder:{root}: val/ has no folder for class {missing[0]} (of {classes}); give "
                                 f"val/{missing[0]} images of it, or remove val/ to have a validation split carved "
                                 f"from train/")
    skipped.extend(p for p in (root / split).iterdir() if not p.is_dir())
    return [(path, label) for label, name in enumerate(classes) if name in folders
            for path in _class_files(root, split, name, skipped)]


def read_folder(root: Path) -> dict[str, np.ndarray]:
    """`root/<split>/<class>/*.png` (or .jpg, .jpeg, .bmp) as arrays in the `npz:` layout."""
    if not (root / "train").is_dir() or not (root / "test").is_dir():
        raise UserInputError(f"folder:{root}: needs {root / 'train'} and {root / 'test'}, each with one folder of "
                             f"images ({_READ}) per class")
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    if not classes:
        raise DatasetFormatError(f"folder:{root}: train/ holds no class folders; give it one folder of images per "
                                 f"class")
    skipped: list[Path] = []
    arrays: dict[str, np.ndarray] = {}
    for split in (s for s in _SPLITS if (root / s).is_dir()):
        files = _split_files(root, split, classes, skipped)
        if split == "train" and not (root / "val").is_dir():
            counts = Counter(label for _, label in files)
            small = next((name for label, name in enumerate(classes) if counts[label] < 2), None)
            if small is not None:
                raise DatasetFormatError(f"folder:{root}: train/{small} holds 1 image, and a validation split carved "
                                         f"from train/ takes at least one image of every class while leaving one to "
                                         f"train on; add images to train/{small}, or give {root / 'val'}")
        images = [_read_image(root, path) for path, _ in files]
        shapes = {image.shape for image in images}
        if len(shapes) != 1:
            raise DatasetFormatError(f"folder:{root}: {split}/ mixes image sizes {sorted(shapes)[:3]}; resize them to "
                                     f"one size")
        arrays[f"x_{split}"] = np.stack(images)
        arrays[f"y_{split}"] = np.array([label for _, label in files], dtype=np.int64)
    if skipped:
        examples = ", ".join(str(p.relative_to(root)) for p in sorted(skipped)[:3])
        entries = "an entry" if len(skipped) == 1 else f"{len(skipped)} entries"
        warnings.warn(f"folder:{root}: left out {entries} that {'is' if len(skipped) == 1 else 'are'} not images "
                      f"({_READ}): {examples}{', ...' if len(skipped) > 3 else ''}", DataWarning, stacklevel=2)
    return arrays
