"""Dataset readers on real-format fixture files built in tmp_path (no real datasets, no network)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pickle
import pickletools
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from esper.runtime import readers
from esper.runtime.readers import (
    EOS_TOKEN,
    IDX_IMAGES_MAGIC,
    IDX_LABELS_MAGIC,
    DatasetFormatError,
    DatasetNotFoundError,
    download_cifar10,
    encode_stories,
    load_cifar10,
    load_fashion_mnist,
    load_tinystories,
    make_windows,
    read_stories,
    split_stories,
)

# ------------------------------------------------------------------------------------------ CIFAR-10 fixtures


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
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    contents = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        (folder / name).write_bytes(cifar_batch_bytes(data, labels))
        contents[name] = (data, labels)
    return contents


def test_cifar_fixture_is_real_format() -> None:
    data = np.arange(2 * 3072, dtype=np.int64).astype(np.uint8).reshape(2, 3072)
    batch = pickle.loads(cifar_batch_bytes(data, [3, 7]), encoding="bytes")
    assert batch[b"labels"] == [3, 7] and batch[b"data"].dtype == np.uint8 and (batch[b"data"] == data).all()


def test_cifar_train_and_val(tmp_path: Path) -> None:
    contents = write_cifar(tmp_path)
    x, y = load_cifar10(tmp_path, "train")
    assert x.shape == (20, 3, 32, 32) and x.dtype == torch.uint8 and y.dtype == torch.int64
    first, labels = contents["data_batch_1"]
    assert torch.equal(x[0, 1, 0], torch.from_numpy(first[0, 1024:1056]))  # channel-major rows of 32 pixels
    assert y[:4].tolist() == labels
    assert y[16:].tolist() == contents["data_batch_5"][1]
    xv, yv = load_cifar10(tmp_path, "val")
    assert xv.shape == (4, 3, 32, 32) and yv.tolist() == contents["test_batch"][1]


def test_cifar_max_samples_is_prefix(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    x, y = load_cifar10(tmp_path, "train")
    xs, ys = load_cifar10(tmp_path, "train", max_samples=6)
    assert torch.equal(xs, x[:6]) and torch.equal(ys, y[:6])


def test_restricted_unpickler_rejects_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return os.system, (f"touch {marker}",)

    write_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}, protocol=2))
    with pytest.raises(DatasetFormatError, match="not allowed") as err:
        load_cifar10(tmp_path, "val")
    assert str(path) in str(err.value)
    assert not marker.exists()


def test_cifar_rejects_wrong_content(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    data = np.zeros((2, 3072), dtype=np.uint8)
    path.write_bytes(cifar_batch_bytes(data, [1]))
    with pytest.raises(DatasetFormatError, match="labels"):
        load_cifar10(tmp_path, "val")


def test_cifar_missing_names_paths_and_download(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as err:
        load_cifar10(tmp_path, "train")
    message = str(err.value)
    assert "cifar10" in message and "--download" in message
    assert str(tmp_path / "cifar-10-batches-py" / "data_batch_1") in message


def _cifar_archive(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    write_cifar(source)
    archive = tmp_path / "upstream.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return archive


def test_download_verifies_and_extracts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _cifar_archive(tmp_path)
    monkeypatch.setattr(readers, "CIFAR10_URL", archive.as_uri())
    monkeypatch.setattr(readers, "CIFAR10_MD5", hashlib.md5(archive.read_bytes()).hexdigest())
    data_dir = tmp_path / "data"
    assert download_cifar10(data_dir) == data_dir / "cifar-10-batches-py"
    assert load_cifar10(data_dir, "val")[0].shape == (4, 3, 32, 32)
    assert sorted(p.name for p in data_dir.iterdir()) == ["cifar-10-batches-py", "cifar-10-python.tar.gz"]
    monkeypatch.setattr(readers, "CIFAR10_URL", (tmp_path / "gone.tar.gz").as_uri())
    assert download_cifar10(data_dir) == data_dir / "cifar-10-batches-py"  # complete data: no fetch


def test_failed_download_is_a_dataset_error_with_a_remedy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers, "CIFAR10_URL", (tmp_path / "gone.tar.gz").as_uri())
    with pytest.raises(DatasetNotFoundError, match=r"download .* failed") as info:
        download_cifar10(tmp_path / "data")
    assert "cifar-10-python.tar.gz" in str(info.value)
    assert not [p for p in (tmp_path / "data").iterdir()]  # no partial file left behind


def test_download_checksum_mismatch_deletes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _cifar_archive(tmp_path)
    monkeypatch.setattr(readers, "CIFAR10_URL", archive.as_uri())
    data_dir = tmp_path / "data"
    with pytest.raises(DatasetFormatError, match="MD5"):
        download_cifar10(data_dir)
    assert list(data_dir.iterdir()) == []


# ------------------------------------------------------------------------------------- Fashion-MNIST fixtures


def _idx(magic: int, array: np.ndarray) -> bytes:
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape) + array.tobytes()


def write_fashion(folder: Path, *, gz: bool, n: int = 20) -> tuple[np.ndarray, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    for prefix in ("train", "t10k"):
        files = {f"{prefix}-images-idx3-ubyte": _idx(2051, images), f"{prefix}-labels-idx1-ubyte": _idx(2049, labels)}
        for name, blob in files.items():
            if gz:
                (folder / f"{name}.gz").write_bytes(gzip.compress(blob))
            else:
                (folder / name).write_bytes(blob)
    return images, labels


@pytest.mark.parametrize("gz", [False, True])
def test_fashion_mnist_reads_idx(tmp_path: Path, gz: bool) -> None:
    images, labels = write_fashion(tmp_path / "fashion-mnist", gz=gz)
    x, y = load_fashion_mnist(tmp_path, "train", system_dir=None)
    assert x.shape == (20, 1, 28, 28) and x.dtype == torch.uint8 and y.dtype == torch.int64
    assert torch.equal(x[:, 0], torch.from_numpy(images)) and y.tolist() == labels.tolist()
    assert load_fashion_mnist(tmp_path, "val", max_samples=5, system_dir=None)[0].shape == (5, 1, 28, 28)


def test_fashion_mnist_falls_back_to_system_dir(tmp_path: Path) -> None:
    write_fashion(tmp_path / "system", gz=True)
    x, _ = load_fashion_mnist(tmp_path / "empty", "val", system_dir=tmp_path / "system")
    assert x.shape == (20, 1, 28, 28)


def test_idx_bad_magic_names_file(tmp_path: Path) -> None:
    folder = tmp_path / "fashion-mnist"
    write_fashion(folder, gz=False)
    bad = folder / "train-labels-idx1-ubyte"
    bad.write_bytes(_idx(IDX_IMAGES_MAGIC, np.zeros(20, dtype=np.uint8)))
    with pytest.raises(DatasetFormatError, match="magic") as err:
        load_fashion_mnist(tmp_path, "train", system_dir=None)
    assert str(bad) in str(err.value)


def test_idx_truncated_names_file(tmp_path: Path) -> None:
    folder = tmp_path / "fashion-mnist"
    write_fashion(folder, gz=True)
    bad = folder / "t10k-images-idx3-ubyte.gz"
    bad.write_bytes(gzip.compress(_idx(IDX_IMAGES_MAGIC, np.zeros((20, 28, 28), dtype=np.uint8))[:-100]))
    with pytest.raises(DatasetFormatError, match="implies") as err:
        load_fashion_mnist(tmp_path, "val", system_dir=None)
    assert str(bad) in str(err.value)
    bad.write_bytes(gzip.compress(b"x" * 100)[:-10])  # a cut gzip stream
    with pytest.raises(DatasetFormatError, match=str(bad)):
        load_fashion_mnist(tmp_path, "val", system_dir=None)


def test_idx_count_mismatch(tmp_path: Path) -> None:
    folder = tmp_path / "fashion-mnist"
    write_fashion(folder, gz=False)
    (folder / "train-labels-idx1-ubyte").write_bytes(_idx(IDX_LABELS_MAGIC, np.zeros(19, dtype=np.uint8)))
    with pytest.raises(DatasetFormatError, match="20 images"):
        load_fashion_mnist(tmp_path, "train", system_dir=None)


def test_fashion_missing_lists_paths_and_remedy(tmp_path: Path) -> None:
    system = tmp_path / "nowhere"
    with pytest.raises(DatasetNotFoundError) as err:
        load_fashion_mnist(tmp_path, "train", system_dir=system)
    message = str(err.value)
    assert "fashion_mnist" in message and "apt-get install dataset-fashion-mnist" in message
    assert str(tmp_path / "fashion-mnist" / "train-images-idx3-ubyte") in message
    assert str(system / "train-labels-idx1-ubyte") in message


# ------------------------------------------------------------------------------------------------- TinyStories

STORIES = [f"Story {i}: Tom saw a cat.\nIt was happy ü." for i in range(40)]


def _decode(tokens: torch.Tensor) -> list[str]:
    stories, current = [], bytearray()
    for t in tokens.tolist():
        if t == EOS_TOKEN:
            stories.append(current.decode("utf-8"))
            current = bytearray()
        else:
            current.append(t)
    assert not current, "stream must end with EOS"
    return stories


def test_txt_blank_line_stories(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text("\n\n".join(STORIES[:3]) + "\n  \n\n" + STORIES[3] + "\n", encoding="utf-8")
    assert read_stories(path) == STORIES[:4]


def test_txt_endoftext_keeps_paragraphs(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text("One.\n\nTwo.\n<|endoftext|>\nThree.\n<|endoftext|>\n", encoding="utf-8")
    assert read_stories(path) == ["One.\n\nTwo.", "Three."]


def test_jsonl_stories_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(json.dumps({"text": s}) for s in STORIES[:3]) + "\n\n", encoding="utf-8")
    assert read_stories(path) == STORIES[:3]
    path.write_text('{"text": "ok"}\n{"story": "no text"}\n', encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=f"{path}:2"):
        read_stories(path)


def test_eos_after_every_story() -> None:
    stories = ["a", "", "héllo", "x\n\ny"]
    tokens = encode_stories(stories)
    assert tokens.dtype == torch.int64 and int(tokens.max()) == EOS_TOKEN
    assert int((tokens == EOS_TOKEN).sum()) == len(stories)
    assert _decode(tokens) == stories


def test_split_95_5_deterministic_disjoint() -> None:
    train, val = split_stories(STORIES, "train"), split_stories(STORIES, "val")
    assert len(val) == 2 and train + val == STORIES
    assert split_stories(STORIES, "val") == val
    assert split_stories(STORIES[:3], "val") == STORIES[2:3]


def test_windows_shift_and_tail() -> None:
    tokens = torch.arange(23)
    train = make_windows(tokens, 5, keep_tail=False)
    assert train.inputs.shape == (4, 5) and train.tail is None
    assert train.inputs[1].tolist() == [5, 6, 7, 8, 9] and train.targets[1].tolist() == [6, 7, 8, 9, 10]
    val = make_windows(tokens, 5, keep_tail=True)
    assert val.tail is not None and len(val) == 5
    assert val.tail[0].tolist() == [[20, 21]] and val.tail[1].tolist() == [[21, 22]]
    capped = make_windows(tokens, 5, keep_tail=True, max_windows=2)
    assert len(capped) == 2 and capped.tail is None
    assert capped.targets[1].tolist() == [6, 7, 8, 9, 10]
    assert capped.inputs.untyped_storage().nbytes() < tokens.untyped_storage().nbytes()  # does not pin the stream
    exact = make_windows(torch.arange(21), 5, keep_tail=True)  # no leftover beyond the shared last token
    assert exact.inputs.shape == (4, 5) and exact.tail is None
    short = make_windows(torch.arange(4), 5, keep_tail=True)
    assert short.inputs.shape == (0, 5) and short.tail is not None and short.tail[0].shape == (1, 3)


def test_val_windows_cover_every_token(tmp_path: Path) -> None:
    path = tmp_path / "all.jsonl"
    path.write_text("\n".join(json.dumps({"text": s}) for s in STORIES), encoding="utf-8")
    windows = load_tinystories(tmp_path, "val", 16, data_path=path)
    assert windows.tail is not None and windows.tail[0].shape[1] < 16
    stream = torch.cat([windows.inputs[0, :1], windows.targets.reshape(-1), windows.tail[1].reshape(-1)])
    assert _decode(stream) == STORIES[-2:]


def test_tinystories_single_file_in_data_dir(tmp_path: Path) -> None:
    folder = tmp_path / "tinystories"
    folder.mkdir()
    (folder / "train.txt").write_text("<|endoftext|>".join(STORIES), encoding="utf-8")
    train = load_tinystories(tmp_path, "train", 8)
    val = load_tinystories(tmp_path, "val", 8)
    n_train_tokens = sum(len(s.encode()) + 1 for s in STORIES[:38])
    assert train.inputs.shape[0] == (n_train_tokens - 1) // 8 and train.tail is None
    assert torch.equal(val.inputs[0], encode_stories(STORIES[38:])[:8])


def test_tinystories_train_and_valid_files(tmp_path: Path) -> None:
    folder = tmp_path / "tinystories"
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join(json.dumps({"text": s}) for s in STORIES[:5]), encoding="utf-8")
    (folder / "valid.txt").write_text("\n\n".join(STORIES[5:7]), encoding="utf-8")
    train = load_tinystories(tmp_path, "train", 4, max_samples=3)
    assert train.inputs.shape == (3, 4) and torch.equal(train.inputs[0], encode_stories(STORIES[:1])[:4])
    val = load_tinystories(tmp_path, "val", 4)
    assert val.inputs.shape[0] * 4 + (val.tail[0].shape[1] if val.tail else 0) == len(encode_stories(STORIES[5:7])) - 1


def test_tinystories_missing(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as err:
        load_tinystories(tmp_path, "train", 8)
    message = str(err.value)
    assert "tinystories" in message and "--data-path" in message
    for name in ("train.txt", "train.jsonl", "valid.txt", "valid.jsonl"):
        assert str(tmp_path / "tinystories" / name) in message
    with pytest.raises(DatasetNotFoundError, match=r"missing\.txt"):
        load_tinystories(tmp_path, "train", 8, data_path=tmp_path / "missing.txt")


def test_pickle_fixture_has_no_python3_bytes_globals() -> None:
    data = np.zeros((1, 3072), dtype=np.uint8)
    blob = cifar_batch_bytes(data, [0])
    names = {arg for op, arg, _ in pickletools.genops(io.BytesIO(blob)) if op.name == "GLOBAL"}
    assert names == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}
