"""Task registry and data access: specs, lookup, caching, missing data."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
import torch

from esper.kasmina.hosts import CNNHost, TransformerHost
from esper.runtime import readers, tasks
from esper.runtime.readers import VOCAB_SIZE, DatasetNotFoundError, TokenWindows
from esper.runtime.tasks import TASKS, DataCache, DataOptions, get_task_spec

EXPECTED = {  # name: (topology, task_type, outputs, input_shape, target_loss, batch, val_batch)
    "synthetic": ("cnn", "classification", 10, (3, 32, 32), 0.5, 128, 512),
    "cifar10": ("cnn", "classification", 10, (3, 32, 32), 0.3, 128, 512),
    "cifar10_deep": ("cnn", "classification", 10, (3, 32, 32), 0.3, 128, 512),
    "fashion_mnist": ("cnn", "classification", 10, (1, 28, 28), 0.25, 128, 512),
    "tinystories": ("transformer", "lm", 257, (256,), 1.2, 32, 64),
    "synthetic_text": ("transformer", "lm", 257, (64,), 0.6, 32, 64),
}


def test_registry_holds_the_specified_tasks() -> None:
    assert set(TASKS) == set(EXPECTED)
    for name, spec in TASKS.items():
        assert spec.name == name
        assert (spec.topology, spec.task_type, spec.num_outputs, spec.input_shape, spec.target_loss,
                spec.default_batch_size, spec.val_batch_size) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_task_spec_is_consistent(name: str) -> None:
    """random_guess_loss = ln(outputs); the host builds and maps an input of input_shape to the right shape."""
    spec = get_task_spec(name)
    assert spec.random_guess_loss == pytest.approx(math.log(spec.num_outputs))
    assert 0 < spec.target_loss < spec.random_guess_loss
    host = spec.host_factory()
    assert host.topology == spec.topology
    assert spec.host_factory() is not host  # a fresh host per call
    if spec.task_type == "lm":
        assert isinstance(host, TransformerHost) and spec.num_outputs == VOCAB_SIZE == 257
        assert spec.block_size == spec.input_shape[0] == host.block_size
        assert spec.lifecycle.min_training_epochs == 5
        assert spec.augment is None
        if name == "tinystories":
            assert sum(p.numel() for p in host.parameters()) > 4_000_000
            return  # the 4.9M-parameter host is only built, not run
        x = torch.randint(0, spec.num_outputs, (2, *spec.input_shape))
        expected_shape = (2, spec.input_shape[0], spec.num_outputs)
    else:
        assert isinstance(host, CNNHost) and spec.block_size is None
        assert spec.augment is not None and spec.lifecycle.min_training_epochs == 3
        x = torch.randn(2, *spec.input_shape)
        expected_shape = (2, spec.num_outputs)
    host.eval()
    with torch.no_grad():
        assert tuple(host(x).shape) == expected_shape


def test_cnn_hosts_and_optimizers() -> None:
    def channels(name: str) -> tuple[int, ...]:
        host = get_task_spec(name).host_factory()
        return tuple(block[0].out_channels for block in host.blocks)

    assert channels("cifar10") == channels("synthetic") == channels("fashion_mnist") == (8, 16, 32)
    assert channels("cifar10_deep") == (8, 16, 32, 64, 128)
    assert get_task_spec("fashion_mnist").host_factory().blocks[0][0].in_channels == 1
    for name in ("cifar10", "cifar10_deep", "fashion_mnist"):
        spec = get_task_spec(name)
        h = spec.host_optimizer
        assert (h.name, h.lr, h.momentum, h.weight_decay) == ("sgd", 0.01, 0.9, 5e-4)
    syn = get_task_spec("synthetic").host_optimizer  # lr deliberately differs from the other CNN tasks (see tasks.py)
    assert (syn.name, syn.momentum, syn.weight_decay) == ("sgd", 0.9, 5e-4)
    for name in ("synthetic", "cifar10", "cifar10_deep", "fashion_mnist"):
        s = get_task_spec(name).seed_optimizer
        assert (s.name, s.lr, s.momentum, s.weight_decay) == ("sgd", 0.01, 0.9, 0.0)
    t = get_task_spec("tinystories")
    assert (t.host_optimizer.name, t.host_optimizer.lr, t.host_optimizer.betas, t.host_optimizer.weight_decay) == (
        "adamw", 3e-4, (0.9, 0.95), 0.1)
    assert (t.seed_optimizer.name, t.seed_optimizer.lr, t.seed_optimizer.weight_decay) == ("adamw", 3e-4, 0.0)
    st = get_task_spec("synthetic_text")
    assert (st.host_optimizer.name, st.host_optimizer.lr) == (st.seed_optimizer.name, st.seed_optimizer.lr) == (
        "adamw", 1e-3)


def test_get_task_spec_is_case_insensitive_and_lists_tasks() -> None:
    assert get_task_spec("SYNTHETIC") is get_task_spec("Synthetic") is TASKS["synthetic"]
    with pytest.raises(ValueError, match="Unknown task 'imagenet'") as info:
        get_task_spec("imagenet")
    assert all(name in str(info.value) for name in TASKS)


# ------------------------------------------------------------------------------------------------ data


def test_data_cache_keys_by_task_split_and_cap() -> None:
    cache = DataCache(DataOptions())
    spec = get_task_spec("synthetic")
    a = cache.get(spec, "train", "cpu", 40)
    assert cache.get(spec, "train", torch.device("cpu"), 40) is a
    b = cache.get(spec, "train", "cpu", 20)
    assert b is not a and len(b) == 20 and len(a) == 40
    assert cache.get(spec, "val", "cpu", 40) is not a
    assert DataCache(DataOptions()).get(spec, "train", "cpu", 40) is not a  # caches are owned per run


def test_synthetic_is_deterministic_and_capped_prefixes_match() -> None:
    spec = get_task_spec("synthetic")
    options = DataOptions()
    x1, y1 = spec.load(options, "train", 70)  # type: ignore[misc]
    x2, y2 = spec.load(options, "train", 70)  # type: ignore[misc]
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.shape == (70, 3, 32, 32) and y1.shape == (70,) and y1.dtype == torch.int64
    xs, ys = spec.load(options, "train", 25)  # type: ignore[misc]
    assert torch.equal(xs, x1[:25]) and torch.equal(ys, y1[:25])
    xv, _ = spec.load(options, "val", 25)  # type: ignore[misc]
    assert not torch.equal(xv, xs)


def test_synthetic_text_windows() -> None:
    spec = get_task_spec("synthetic_text")
    windows = spec.load(DataOptions(), "train", 5)
    assert isinstance(windows, TokenWindows)
    assert windows.inputs.shape == windows.targets.shape == (5, 64)
    assert torch.equal(windows.inputs[:, 1:], windows.targets[:, :-1])  # next-token shift
    again = spec.load(DataOptions(), "train", 3)
    assert isinstance(again, TokenWindows) and torch.equal(again.inputs, windows.inputs[:3])


def test_missing_cifar_names_path_and_download(tmp_path: Path) -> None:
    for name in ("cifar10", "cifar10_deep"):
        with pytest.raises(DatasetNotFoundError) as info:
            get_task_spec(name).load(DataOptions(data_dir=tmp_path), "train", 10)
        message = str(info.value)
        assert str(tmp_path / "cifar-10-batches-py") in message and "--download" in message
    with pytest.raises(DatasetNotFoundError):
        DataCache(DataOptions(data_dir=tmp_path)).get(get_task_spec("cifar10"), "val", "cpu")


def test_missing_fashion_mnist_raises_without_system_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = tmp_path / "no-system-dir"
    monkeypatch.setattr(tasks, "load_fashion_mnist", functools.partial(readers.load_fashion_mnist, system_dir=absent))
    with pytest.raises(DatasetNotFoundError) as info:
        get_task_spec("fashion_mnist").load(DataOptions(data_dir=tmp_path / "data"), "train", 10)
    message = str(info.value)
    assert "fashion_mnist" in message and "dataset-fashion-mnist" in message
    assert str(tmp_path / "data" / "fashion-mnist") in message and str(absent) in message
    assert info.value.task == "fashion_mnist"
