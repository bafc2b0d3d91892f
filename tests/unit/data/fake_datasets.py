"""Real-format dataset fixtures written in tmp_path: CIFAR-10 batches as Python 2 cPickle wrote them, and IDX files."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from esper.data.readers import IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC

CIFAR_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))


def _py2_str(b: bytes) -> bytes:
    """A Python 2 `str` as cPickle wrote it (SHORT_BINSTRING / BINSTRING)."""
    return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b


def _py2_int(v: int) -> bytes:
    return b"K" + bytes([v]) if v < 256 else b"M" + struct.pack("<H", v) if v < 65536 else b"J" + struct.pack("<i", v)


def cifar_batch_bytes(data: np.ndarray, labels: list[int]) -> bytes:
    """Protocol-2 pickle laid out like the real Python 2 CIFAR-10 batches (numpy array rebuilt via _reconstruct)."""
    n = data.shape[0]
    array = (
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + _py2_str(b"b") + b"\x87R"
        b"(K\x01" + _py2_int(n) + _py2_int(3072) + b"\x86"
        b"cnumpy\ndtype\n" + _py2_str(b"u1") + b"K\x00K\x01\x87R"
        b"(K\x03" + _py2_str(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
        b"\x89" + _py2_str(data.tobytes()) + b"tb"
    )
    return (
        b"\x80\x02}("
        + _py2_str(b"batch_label") + _py2_str(b"training batch 1 of 5")
        + _py2_str(b"labels") + b"](" + b"".join(_py2_int(v) for v in labels) + b"e"
        + _py2_str(b"data") + array
        + _py2_str(b"filenames") + b"](" + b"".join(_py2_str(b"img_%d.png" % i) for i in range(n)) + b"e"
        + b"u."
    )  # fmt: skip


def write_cifar(root: Path, per_batch: int = 4) -> dict[str, tuple[np.ndarray, list[int]]]:
    """Five training batches and the test batch of `per_batch` random images each (no two alike)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    contents = {}
    for name in [*CIFAR_TRAIN_BATCHES, "test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        (folder / name).write_bytes(cifar_batch_bytes(data, labels))
        contents[name] = (data, labels)
    return contents


def idx_bytes(magic: int, array: np.ndarray) -> bytes:
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape) + array.tobytes()


def write_fashion(folder: Path, *, gz: bool, n: int = 20, n_test: int = 20
                  ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """`train` (n) and `t10k` (n_test) IDX files of random images, keyed by prefix; the two hold different images."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    contents = {}
    for prefix, count in (("train", n), ("t10k", n_test)):
        images = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, count, dtype=np.uint8)
        files = {f"{prefix}-images-idx3-ubyte": idx_bytes(IDX_IMAGES_MAGIC, images),
                 f"{prefix}-labels-idx1-ubyte": idx_bytes(IDX_LABELS_MAGIC, labels)}
        for name, blob in files.items():
            if gz:
                (folder / f"{name}.gz").write_bytes(gzip.compress(blob))
            else:
                (folder / name).write_bytes(blob)
        contents[prefix] = (images, labels)
    return contents
