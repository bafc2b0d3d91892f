"""Dataset readers on real-format fixture files built in tmp_path (no real datasets, no network)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pickle
import pickletools
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from esper.data import readers
from esper.data.readers import (
    EOS_TOKEN,
    IDX_IMAGES_MAGIC,
    IDX_LABELS_MAGIC,
    DatasetFormatError,
    DatasetNotFoundError,
    carve_split,
    carve_stories,
    download_cifar10,
    encode_stories,
    fashion_mnist_directory,
    load_cifar10,
    load_fashion_mnist,
    load_tinystories,
    make_windows,
    read_stories,
    split_stories,
)
from unit.data.fake_datasets import cifar_batch_bytes, idx_bytes, write_cifar, write_fashion

# ---------------------------------------------------------------------------------------------------- CIFAR-10


def test_cifar_fixture_is_real_format() -> None:
    data = np.arange(2 * 3072, dtype=np.int64).astype(np.uint8).reshape(2, 3072)
    batch = pickle.loads(cifar_batch_bytes(data, [3, 7]), encoding="bytes")
    assert batch[b"labels"] == [3, 7] and batch[b"data"].dtype == np.uint8 and (batch[b"data"] == data).all()


def test_cifar_train_val_and_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`train` is the training batches minus their last CIFAR10_VAL_SIZE images, `val` those (here 6 of 20, across
    the boundary of the last two batches), `test` the test batch."""
    contents = write_cifar(tmp_path)
    monkeypatch.setattr(readers, "CIFAR10_VAL_SIZE", 6)
    x, y = load_cifar10(tmp_path, "train")
    assert x.shape == (14, 3, 32, 32) and x.dtype == torch.uint8 and y.dtype == torch.int64
    first, labels = contents["data_batch_1"]
    assert torch.equal(x[0, 1, 0], torch.from_numpy(first[0, 1024:1056]))  # channel-major rows of 32 pixels
    assert y[:4].tolist() == labels
    assert y[12:].tolist() == contents["data_batch_4"][1][:2]
    xv, yv = load_cifar10(tmp_path, "val")
    assert xv.shape == (6, 3, 32, 32) and yv.tolist() == contents["data_batch_4"][1][2:] + contents["data_batch_5"][1]
    assert torch.equal(xv[-1].flatten(), torch.from_numpy(contents["data_batch_5"][0][-1]))
    xt, yt = load_cifar10(tmp_path, "test")
    assert xt.shape == (4, 3, 32, 32) and yt.tolist() == contents["test_batch"][1]
    assert torch.equal(xt.flatten(1), torch.from_numpy(contents["test_batch"][0]))


def test_cifar_too_few_training_images_for_validation(tmp_path: Path) -> None:
    write_cifar(tmp_path)  # 20 training images, CIFAR10_VAL_SIZE = 5000
    for split in ("train", "val"):
        with pytest.raises(DatasetFormatError, match="20 training samples cannot hold a 5000-sample validation"):
            load_cifar10(tmp_path, split)
    assert load_cifar10(tmp_path, "test")[0].shape == (4, 3, 32, 32)  # the test batch is not carved


def test_carve_split_is_the_documented_slice() -> None:
    """The real sizes, by index: CIFAR-10 keeps 45,000 / 5,000, Fashion-MNIST 50,000 / 10,000 (last N are val)."""
    for total, val_size, constant in ((50_000, 5000, readers.CIFAR10_VAL_SIZE),
                                      (60_000, 10_000, readers.FASHION_MNIST_VAL_SIZE)):
        assert constant == val_size
        index = torch.arange(total)
        train, train_labels = carve_split(index, -index, "train", val_size)
        val, val_labels = carve_split(index, -index, "val", val_size)
        assert torch.equal(train, torch.arange(total - val_size)) and torch.equal(train_labels, -train)
        assert torch.equal(val, torch.arange(total - val_size, total)) and torch.equal(val_labels, -val)
    with pytest.raises(DatasetFormatError, match="cannot hold"):
        carve_split(torch.arange(5), torch.arange(5), "train", 5)


def test_restricted_unpickler_rejects_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return os.system, (f"touch {marker}",)

    write_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}, protocol=2))
    with pytest.raises(DatasetFormatError, match="not allowed") as err:
        load_cifar10(tmp_path, "test")
    assert str(path) in str(err.value)
    assert not marker.exists()


def test_cifar_rejects_wrong_content(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    data = np.zeros((2, 3072), dtype=np.uint8)
    path.write_bytes(cifar_batch_bytes(data, [1]))
    with pytest.raises(DatasetFormatError, match="labels"):
        load_cifar10(tmp_path, "test")


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
    assert load_cifar10(data_dir, "test")[0].shape == (4, 3, 32, 32)
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


@pytest.mark.parametrize("gz", [False, True])
def test_fashion_mnist_reads_idx(tmp_path: Path, gz: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """`train` is the training file minus its last FASHION_MNIST_VAL_SIZE images (here 5 of 20), `val` those, `test`
    the t10k file."""
    contents = write_fashion(tmp_path / "fashion-mnist", gz=gz, n_test=7)
    monkeypatch.setattr(readers, "FASHION_MNIST_VAL_SIZE", 5)
    images, labels = contents["train"]
    x, y = load_fashion_mnist(tmp_path, "train", system_dir=None)
    assert x.shape == (15, 1, 28, 28) and x.dtype == torch.uint8 and y.dtype == torch.int64
    assert torch.equal(x[:, 0], torch.from_numpy(images[:15])) and y.tolist() == labels[:15].tolist()
    xv, yv = load_fashion_mnist(tmp_path, "val", system_dir=None)
    assert torch.equal(xv[:, 0], torch.from_numpy(images[15:])) and yv.tolist() == labels[15:].tolist()
    test_images, test_labels = contents["t10k"]
    xt, yt = load_fashion_mnist(tmp_path, "test", system_dir=None)
    assert xt.shape == (7, 1, 28, 28) and yt.dtype == torch.int64
    assert torch.equal(xt[:, 0], torch.from_numpy(test_images)) and yt.tolist() == test_labels.tolist()
    with pytest.raises(DatasetFormatError, match="cannot hold"):
        monkeypatch.setattr(readers, "FASHION_MNIST_VAL_SIZE", 20)
        load_fashion_mnist(tmp_path, "val", system_dir=None)


def test_fashion_mnist_falls_back_to_system_dir(tmp_path: Path) -> None:
    write_fashion(tmp_path / "system", gz=True)
    x, _ = load_fashion_mnist(tmp_path / "empty", "test", system_dir=tmp_path / "system")
    assert x.shape == (20, 1, 28, 28)
    # the fallback is no secret: runs record (and print) where the files came from
    assert fashion_mnist_directory(tmp_path / "empty", tmp_path / "system") == tmp_path / "system"
    assert fashion_mnist_directory(tmp_path / "empty", None) is None
    write_fashion(tmp_path / "mine" / "fashion-mnist", gz=False)
    assert fashion_mnist_directory(tmp_path / "mine", tmp_path / "system") == tmp_path / "mine" / "fashion-mnist"


def test_idx_bad_magic_names_file(tmp_path: Path) -> None:
    folder = tmp_path / "fashion-mnist"
    write_fashion(folder, gz=False)
    bad = folder / "train-labels-idx1-ubyte"
    bad.write_bytes(idx_bytes(IDX_IMAGES_MAGIC, np.zeros(20, dtype=np.uint8)))
    with pytest.raises(DatasetFormatError, match="magic") as err:
        load_fashion_mnist(tmp_path, "train", system_dir=None)
    assert str(bad) in str(err.value)


def test_idx_truncated_names_file(tmp_path: Path) -> None:
    folder = tmp_path / "fashion-mnist"
    write_fashion(folder, gz=True)
    bad = folder / "t10k-images-idx3-ubyte.gz"
    bad.write_bytes(gzip.compress(idx_bytes(IDX_IMAGES_MAGIC, np.zeros((20, 28, 28), dtype=np.uint8))[:-100]))
    with pytest.raises(DatasetFormatError, match="implies") as err:
        load_fashion_mnist(tmp_path, "test", system_dir=None)
    assert str(bad) in str(err.value)
    bad.write_bytes(gzip.compress(b"x" * 100)[:-10])  # a cut gzip stream
    with pytest.raises(DatasetFormatError, match=str(bad)):
        load_fashion_mnist(tmp_path, "test", system_dir=None)


def test_idx_count_mismatch(tmp_path: Path) -> None:
    folder = tmp_path / "fashion-mnist"
    write_fashion(folder, gz=False)
    (folder / "train-labels-idx1-ubyte").write_bytes(idx_bytes(IDX_LABELS_MAGIC, np.zeros(19, dtype=np.uint8)))
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


def test_split_90_5_5_deterministic_disjoint() -> None:
    train, val, test = (split_stories(STORIES, s) for s in ("train", "val", "test"))
    assert (len(train), len(val), len(test)) == (36, 2, 2) and train + val + test == STORIES
    assert split_stories(STORIES, "val") == val and split_stories(STORIES, "test") == test
    three = [split_stories(STORIES[:3], s) for s in ("train", "val", "test")]
    assert three == [STORIES[:1], STORIES[1:2], STORIES[2:3]]
    with pytest.raises(DatasetFormatError, match="at least 3 stories"):
        split_stories(STORIES[:2], "train")


def test_carve_stories_95_5() -> None:
    """A training file with a separate test file: its last 5 % (at least one story) are validation."""
    train, val = carve_stories(STORIES, "train"), carve_stories(STORIES, "val")
    assert (len(train), len(val)) == (38, 2) and train + val == STORIES
    assert carve_stories(STORIES[:2], "train") == STORIES[:1] and carve_stories(STORIES[:2], "val") == STORIES[1:2]
    with pytest.raises(DatasetFormatError, match="at least 2 training stories"):
        carve_stories(STORIES[:1], "val")


def test_windows_shift_and_tail() -> None:
    tokens = torch.arange(23)
    train = make_windows(tokens, 5, keep_tail=False)
    assert train.inputs.shape == (4, 5) and train.tail is None
    assert train.inputs[1].tolist() == [5, 6, 7, 8, 9] and train.targets[1].tolist() == [6, 7, 8, 9, 10]
    val = make_windows(tokens, 5, keep_tail=True)
    assert val.tail is not None and len(val) == 5
    assert val.tail[0].tolist() == [[20, 21]] and val.tail[1].tolist() == [[21, 22]]
    assert torch.equal(val.inputs, train.inputs) and torch.equal(val.targets, train.targets)
    exact = make_windows(torch.arange(21), 5, keep_tail=True)  # no leftover beyond the shared last token
    assert exact.inputs.shape == (4, 5) and exact.tail is None
    short = make_windows(torch.arange(4), 5, keep_tail=True)
    assert short.inputs.shape == (0, 5) and short.tail is not None and short.tail[0].shape == (1, 3)


def _stream(windows: readers.TokenWindows) -> torch.Tensor:
    """The token stream an evaluation split's windows (tail included) score."""
    tail = [] if windows.tail is None else [windows.tail[1].reshape(-1)]
    return torch.cat([windows.inputs[0, :1], windows.targets.reshape(-1), *tail])


def test_val_and_test_windows_cover_every_token(tmp_path: Path) -> None:
    path = tmp_path / "all.jsonl"
    path.write_text("\n".join(json.dumps({"text": s}) for s in STORIES), encoding="utf-8")
    for split, stories in (("val", STORIES[36:38]), ("test", STORIES[38:])):
        windows = load_tinystories(tmp_path, split, 16, data_path=path)
        assert windows.tail is not None and windows.tail[0].shape[1] < 16
        assert _decode(_stream(windows)) == stories


def test_tinystories_single_file_in_data_dir(tmp_path: Path) -> None:
    folder = tmp_path / "tinystories"
    folder.mkdir()
    (folder / "train.txt").write_text("<|endoftext|>".join(STORIES), encoding="utf-8")
    train = load_tinystories(tmp_path, "train", 8)
    n_train_tokens = sum(len(s.encode()) + 1 for s in STORIES[:36])
    assert train.inputs.shape[0] == (n_train_tokens - 1) // 8 and train.tail is None
    assert torch.equal(train.inputs[0], encode_stories(STORIES[:1])[:8])
    assert _decode(_stream(load_tinystories(tmp_path, "val", 8))) == STORIES[36:38]
    assert _decode(_stream(load_tinystories(tmp_path, "test", 8))) == STORIES[38:]


def test_tinystories_train_and_valid_files(tmp_path: Path) -> None:
    """train/val are the train file (95/5, at least one val story), test is the valid file."""
    folder = tmp_path / "tinystories"
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join(json.dumps({"text": s}) for s in STORIES[:5]), encoding="utf-8")
    (folder / "valid.txt").write_text("\n\n".join(STORIES[5:7]), encoding="utf-8")
    train = load_tinystories(tmp_path, "train", 4)
    n_train_tokens = len(encode_stories(STORIES[:4]))
    assert train.inputs.shape == ((n_train_tokens - 1) // 4, 4) and train.tail is None
    assert torch.equal(train.inputs[0], encode_stories(STORIES[:1])[:4])
    assert torch.equal(train.targets.reshape(-1), encode_stories(STORIES[:4])[1 : train.targets.numel() + 1])
    assert _decode(_stream(load_tinystories(tmp_path, "val", 4))) == STORIES[4:5]
    assert _decode(_stream(load_tinystories(tmp_path, "test", 4))) == STORIES[5:7]


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
