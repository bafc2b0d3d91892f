"""Readers for the on-disk datasets (CIFAR-10, Fashion-MNIST, TinyStories), returning CPU tensors.

Missing data raises `DatasetNotFoundError` (never a random stand-in: a run on fake data would look like a result);
corrupt files raise `DatasetFormatError` naming the file. Nothing here touches the network except
`download_cifar10`, which only runs when the user asks for it (`--download`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import re
import shutil
import tarfile
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from esper.leyline.errors import UserInputError

Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")
"""`val` is carved from the official training data and is all that controllers, rewards and gates ever see; `test`
is the official test split (or held-out data), scored only on the final model of an evaluation episode."""

EOS_TOKEN = 256
VOCAB_SIZE = 257

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_DIRNAME = "cifar-10-batches-py"
_CIFAR10_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR10_TEST_FILES = ("test_batch",)
CIFAR10_IMAGE_SHAPE = (3, 32, 32)
CIFAR10_CLASSES = 10
CIFAR10_VAL_SIZE = 5000
"""`val` is the last 5,000 of CIFAR-10's 50,000 training images; `train` the first 45,000."""

FASHION_MNIST_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
_FASHION_TRAIN_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
_FASHION_TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
FASHION_MNIST_IMAGE_SHAPE = (1, 28, 28)
FASHION_MNIST_CLASSES = 10
FASHION_MNIST_VAL_SIZE = 10000
"""`val` is the last 10,000 of Fashion-MNIST's 60,000 training images; `train` the first 50,000."""
IDX_IMAGES_MAGIC = 2051
IDX_LABELS_MAGIC = 2049

_STORY_SEPARATOR = "<|endoftext|>"


class DatasetNotFoundError(UserInputError):
    """Data for a task is missing; the message names the task, every path searched and how to get the data."""

    def __init__(self, task: str, searched: Sequence[Path], remedy: str) -> None:
        self.task = task
        self.searched = tuple(searched)
        self.remedy = remedy
        paths = "\n".join(f"  {p}" for p in self.searched)
        super().__init__(f"Dataset for task '{task}' not found. Searched:\n{paths}\nTo get it: {remedy}")


class DatasetFormatError(UserInputError):
    """A dataset file exists but is malformed; the message names the file."""


class DataWarning(UserWarning):
    """Data a run leaves out that its user may not know of (files in an image folder that are not images); the
    command line shows it as one line."""


@dataclass(frozen=True)
class TokenWindows:
    """LM windows: full windows (N, T) plus, for validation, one shorter final window (1, t) with t < T.

    The tail cannot share a rectangular tensor with the full windows, so it is carried separately and served as the
    last validation batch. `inputs` and `targets` may be overlapping views of one window tensor (no copy on CPU).
    """

    inputs: Tensor
    targets: Tensor
    tail: tuple[Tensor, Tensor] | None

    def __len__(self) -> int:
        return self.inputs.shape[0] + (1 if self.tail is not None else 0)


# --------------------------------------------------------------------------------------------------- CIFAR-10

# The real batches were written by Python 2 cPickle: str/list/int/dict use plain opcodes, and the uint8 array is
# rebuilt through exactly these three numpy globals. `_reconstruct` is taken from ndarray's own reduce so that no
# deprecated `numpy.core` import is needed.
_CIFAR_PICKLE_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): np.zeros(0).__reduce__()[0],
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the globals needed to rebuild a CIFAR numpy array (no code execution)."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _CIFAR_PICKLE_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed in a CIFAR-10 batch") from None


def read_cifar_batch(path: Path) -> tuple[Tensor, Tensor]:
    """Read one CIFAR-10 python batch as uint8 images (N, 3, 32, 32) and int64 labels (N,)."""
    try:
        with path.open("rb") as f:
            batch = _RestrictedUnpickler(f, encoding="bytes").load()
    except OSError:
        raise
    except Exception as exc:  # a corrupt pickle can fail in many ways; all of them mean "bad file"
        raise DatasetFormatError(f"{path}: not a valid CIFAR-10 batch ({exc})") from exc
    data = batch.get(b"data") if isinstance(batch, dict) else None
    labels = batch.get(b"labels") if isinstance(batch, dict) else None
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DatasetFormatError(f"{path}: expected a uint8 array of shape (N, 3072) under b'data'")
    if not isinstance(labels, list) or len(labels) != data.shape[0]:
        raise DatasetFormatError(f"{path}: expected a list of {data.shape[0]} labels under b'labels'")
    if not all(isinstance(v, int) and 0 <= v < CIFAR10_CLASSES for v in labels):
        raise DatasetFormatError(f"{path}: labels must be integers in [0, {CIFAR10_CLASSES})")
    images = torch.from_numpy(data.reshape(-1, *CIFAR10_IMAGE_SHAPE).copy())
    return images, torch.tensor(labels, dtype=torch.int64)


def carve_split(images: Tensor, labels: Tensor, split: Split, val_size: int) -> tuple[Tensor, Tensor]:
    """`train` or `val` from official training data: `val` is its last `val_size` samples, `train` the rest."""
    if len(labels) <= val_size:
        raise DatasetFormatError(f"{len(labels)} training samples cannot hold a {val_size}-sample validation split")
    keep = slice(len(labels) - val_size, None) if split == "val" else slice(0, len(labels) - val_size)
    return images[keep], labels[keep]


def load_cifar10(data_dir: str | Path, split: Split) -> tuple[Tensor, Tensor]:
    """Load a CIFAR-10 split from `<data_dir>/cifar-10-batches-py` (`val` carved from the training batches)."""
    root = Path(data_dir) / CIFAR10_DIRNAME
    paths = [root / name for name in (_CIFAR10_TEST_FILES if split == "test" else _CIFAR10_TRAIN_FILES)]
    if not all(p.is_file() for p in paths):
        raise DatasetNotFoundError("cifar10", paths, f"rerun with --download to fetch CIFAR-10 into {Path(data_dir)}")
    batches = [read_cifar_batch(path) for path in paths]
    images, labels = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    return (images, labels) if split == "test" else carve_split(images, labels, split, CIFAR10_VAL_SIZE)


def _cifar10_complete(root: Path) -> bool:
    return all((root / name).is_file() for name in _CIFAR10_TRAIN_FILES + _CIFAR10_TEST_FILES)


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download_cifar10(data_dir: str | Path) -> Path:
    """Fetch, verify and extract CIFAR-10 into `<data_dir>/cifar-10-batches-py` (only when the user asks).

    The archive is written under a temporary name and renamed once complete; a checksum mismatch deletes it and
    raises. Extraction goes to a temporary directory that is renamed into place, so an interrupted run never leaves a
    half-extracted dataset. Returns the dataset directory.
    """
    data_dir = Path(data_dir)
    target = data_dir / CIFAR10_DIRNAME
    if _cifar10_complete(target):
        return target
    if target.exists():
        raise DatasetFormatError(f"{target} exists but is incomplete; remove it and rerun with --download")
    data_dir.mkdir(parents=True, exist_ok=True)
    archive = data_dir / "cifar-10-python.tar.gz"
    if not archive.is_file():
        fd, tmp_name = tempfile.mkstemp(dir=data_dir, prefix=".cifar-10-python.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(CIFAR10_URL) as response:
                shutil.copyfileobj(response, out)
            os.replace(tmp_name, archive)
        except OSError as exc:  # URLError, timeouts, resets: all OSError
            raise DatasetNotFoundError("cifar10", [target], (
                f"the download from {CIFAR10_URL} failed ({exc}); check the network, or put cifar-10-python.tar.gz "
                f"or its {CIFAR10_DIRNAME}/ folder into {data_dir} yourself")) from exc
        finally:
            Path(tmp_name).unlink(missing_ok=True)
    actual = _md5(archive)
    if actual != CIFAR10_MD5:
        archive.unlink()
        raise DatasetFormatError(f"{archive}: MD5 {actual} does not match {CIFAR10_MD5}; the file was deleted")
    with tempfile.TemporaryDirectory(dir=data_dir, prefix=".cifar-10-extract.") as tmp_dir:
        with tarfile.open(archive, "r:gz") as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(CIFAR10_DIRNAME + "/")]
            tar.extractall(tmp_dir, members=members, filter="data")
        extracted = Path(tmp_dir) / CIFAR10_DIRNAME
        if not _cifar10_complete(extracted):
            raise DatasetFormatError(f"{archive}: archive does not contain the CIFAR-10 batches")
        os.replace(extracted, target)
    return target


# ----------------------------------------------------------------------------------------------- Fashion-MNIST


def read_idx(path: Path, magic: int) -> np.ndarray:
    """Read an unsigned-byte IDX file (plain or .gz), validating the magic number and the size implied by the header."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as exc:
        raise DatasetFormatError(f"{path}: cannot read IDX file ({exc})") from exc
    if len(raw) < 4:
        raise DatasetFormatError(f"{path}: truncated IDX file ({len(raw)} bytes)")
    found = int.from_bytes(raw[:4], "big")
    if found != magic:
        raise DatasetFormatError(f"{path}: bad IDX magic number {found}, expected {magic}")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetFormatError(f"{path}: truncated IDX header")
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = header + int(np.prod(dims))
    if len(raw) != expected:
        raise DatasetFormatError(f"{path}: header {dims} implies {expected} bytes, file has {len(raw)}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims).copy()


def _find_idx(directory: Path, name: str) -> Path | None:
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def fashion_mnist_directory(data_dir: str | Path, system_dir: Path | None = FASHION_MNIST_SYSTEM_DIR) -> Path | None:
    """Where Fashion-MNIST is read from: `<data_dir>/fashion-mnist/` when it holds the training files, else the
    system directory of Debian's package when that does; None when neither does."""
    image_name, label_name = _FASHION_TRAIN_FILES
    for directory in [Path(data_dir) / "fashion-mnist"] + ([system_dir] if system_dir is not None else []):
        if _find_idx(directory, image_name) is not None and _find_idx(directory, label_name) is not None:
            return directory
    return None


def load_fashion_mnist(
    data_dir: str | Path,
    split: Split,
    *,
    system_dir: Path | None = FASHION_MNIST_SYSTEM_DIR,
) -> tuple[Tensor, Tensor]:
    """Load Fashion-MNIST as uint8 images (N, 1, 28, 28) and int64 labels.

    Looks in `<data_dir>/fashion-mnist/` first, then in `system_dir` (the install directory of Debian's
    `dataset-fashion-mnist`; None disables the fallback). `val` is carved from the training files.
    """
    directories = [Path(data_dir) / "fashion-mnist"] + ([system_dir] if system_dir is not None else [])
    image_name, label_name = _FASHION_TEST_FILES if split == "test" else _FASHION_TRAIN_FILES
    searched: list[Path] = []
    for directory in directories:
        image_path, label_path = _find_idx(directory, image_name), _find_idx(directory, label_name)
        if image_path is not None and label_path is not None:
            images = read_idx(image_path, IDX_IMAGES_MAGIC)
            labels = read_idx(label_path, IDX_LABELS_MAGIC)
            if len(images) != len(labels):
                raise DatasetFormatError(
                    f"{image_path}: {len(images)} images but {label_path} has {len(labels)} labels"
                )
            x, y = torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels).to(torch.int64)
            return (x, y) if split == "test" else carve_split(x, y, split, FASHION_MNIST_VAL_SIZE)
        searched += [directory / name for name in (image_name, label_name)]
    raise DatasetNotFoundError(
        "fashion_mnist",
        searched,
        f"apt-get install dataset-fashion-mnist, or place {image_name} and {label_name} (plain or .gz) in "
        f"{directories[0]}",
    )


# ------------------------------------------------------------------------------------------ TinyStories (bytes)


def read_stories(path: Path) -> list[str]:
    """Read stories from `.txt` (split on `<|endoftext|>` if present, else on blank lines) or `.jsonl` (`text`)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        stories: list[str] = []
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetFormatError(f"{path}:{line_no}: invalid JSON ({exc})") from exc
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise DatasetFormatError(f"{path}:{line_no}: expected an object with a string field 'text'")
            stories.append(record["text"])
        return stories
    parts = text.split(_STORY_SEPARATOR) if _STORY_SEPARATOR in text else re.split(r"\n[ \t\r]*\n", text)
    return [s for s in (p.strip() for p in parts) if s]


def encode_stories(stories: Sequence[str]) -> Tensor:
    """UTF-8 bytes of every story followed by EOS (256), concatenated into one int64 stream."""
    encoded = [s.encode("utf-8") for s in stories]
    lengths = torch.tensor([len(b) + 1 for b in encoded], dtype=torch.int64)
    stream = torch.full((int(lengths.sum()),), EOS_TOKEN, dtype=torch.int64)
    is_byte = torch.ones_like(stream, dtype=torch.bool)
    is_byte[lengths.cumsum(0) - 1] = False
    payload = b"".join(encoded)
    if payload:
        stream[is_byte] = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(torch.int64)
    return stream


def make_windows(tokens: Tensor, block_size: int, *, keep_tail: bool) -> TokenWindows:
    """Cut a token stream into windows of block_size + 1 at stride block_size (x = first T tokens, y = shift by one).

    With `keep_tail` the leftover tokens (at least 2) form one shorter final window, so evaluation scores every
    token.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    n_full = max(tokens.numel() - 1, 0) // block_size
    rest = tokens[n_full * block_size :]
    tail: tuple[Tensor, Tensor] | None = None
    if keep_tail and rest.numel() >= 2:
        tail = (rest[:-1].unsqueeze(0).clone(), rest[1:].unsqueeze(0).clone())
    if n_full == 0:
        windows = tokens.new_empty((0, block_size + 1))
    else:
        windows = tokens[: n_full * block_size + 1].unfold(0, block_size + 1, block_size)
    return TokenWindows(windows[:, :-1], windows[:, 1:], tail)


def split_stories(stories: Sequence[str], split: Split) -> list[str]:
    """Deterministic split by index of one story file: 90 % train, then 5 % val, then the last 5 % test (at least
    one story each)."""
    if len(stories) < 3:
        raise DatasetFormatError(f"need at least 3 stories to split into train, val and test, got {len(stories)}")
    n_held = max(1, len(stories) // 20)
    bounds = {"train": (0, len(stories) - 2 * n_held), "val": (len(stories) - 2 * n_held, len(stories) - n_held),
              "test": (len(stories) - n_held, len(stories))}
    start, stop = bounds[split]
    return list(stories[start:stop])


def carve_stories(stories: Sequence[str], split: Split) -> list[str]:
    """`train` or `val` from a training file: the last 5 % of its stories (at least one) are validation."""
    if len(stories) < 2:
        raise DatasetFormatError(f"need at least 2 training stories to carve a validation split, got {len(stories)}")
    n_val = max(1, len(stories) // 20)
    return list(stories[len(stories) - n_val :] if split == "val" else stories[: len(stories) - n_val])


def _first_file(directory: Path, stem: str) -> tuple[Path | None, list[Path]]:
    candidates = [directory / f"{stem}.txt", directory / f"{stem}.jsonl"]
    return next((p for p in candidates if p.is_file()), None), candidates


def tinystories_stories(data_dir: str | Path, split: Split, data_path: Path | None = None) -> list[str]:
    """Stories of one split: from `data_path` (split 90/5/5), or `<data_dir>/tinystories/{train,valid}.{txt,jsonl}`.

    With both files, `train` and `val` come from the train file (95/5) and `test` is the valid file; when only one
    exists it is split 90/5/5. `.txt` wins over `.jsonl` for the same stem.
    """
    if data_path is not None:
        if not data_path.is_file():
            raise DatasetNotFoundError("tinystories", [data_path], "pass an existing file with --data-path")
        return split_stories(read_stories(data_path), split)
    directory = Path(data_dir) / "tinystories"
    train_file, train_candidates = _first_file(directory, "train")
    val_file, val_candidates = _first_file(directory, "valid")
    if train_file is not None and val_file is not None:
        return read_stories(val_file) if split == "test" else carve_stories(read_stories(train_file), split)
    only = train_file or val_file
    if only is None:
        raise DatasetNotFoundError(
            "tinystories",
            train_candidates + val_candidates,
            f"pass --data-path FILE (.txt or .jsonl), or place train/valid files in {directory}",
        )
    return split_stories(read_stories(only), split)


def load_tinystories(data_dir: str | Path, split: Split, block_size: int, *, data_path: Path | None = None
                     ) -> TokenWindows:
    """TinyStories windows for one split; validation and test keep their last partial window."""
    stories = tinystories_stories(data_dir, split, data_path)
    return make_windows(encode_stories(stories), block_size, keep_tail=split != "train")
