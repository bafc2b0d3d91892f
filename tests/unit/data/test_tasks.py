"""Task registry and data access: specs, lookup, caching, missing data."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
import torch

from esper.data import builtin_tasks, readers, tasks
from esper.data.batches import DeviceDataset
from esper.data.readers import VOCAB_SIZE, DatasetNotFoundError, TokenWindows
from esper.data.tasks import TASKS, DataCache, DataOptions, draw_subset, get_task_spec
from esper.kasmina.hosts import CNNHost, TransformerHost
from esper.leyline.seeding import derive_seed

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
        assert spec.augment == "none" and spec.augmentation(None) is None
        with pytest.raises(ValueError, match="has no images to augment"):
            spec.augmentation("flip")
        if name == "tinystories":
            assert sum(p.numel() for p in host.parameters()) > 4_000_000
            return  # the 4.9M-parameter host is only built, not run
        x = torch.randint(0, spec.num_outputs, (2, *spec.input_shape))
        expected_shape = (2, spec.input_shape[0], spec.num_outputs)
    else:
        assert isinstance(host, CNNHost) and spec.block_size is None
        assert spec.augment == "crop,flip" and spec.lifecycle.min_training_epochs == 3  # esper's own image tasks
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
    syn = get_task_spec("synthetic").host_optimizer  # lr differs from the other CNN tasks on purpose (builtin_tasks.py)
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
    assert "npz:PATH.npz" in str(info.value) and "folder:DIR" in str(info.value) and "--plugin" in str(info.value)


# ------------------------------------------------------------------------------------------------ data


def test_data_cache_keeps_one_pool_per_task_split_and_device() -> None:
    cache = DataCache(DataOptions())
    spec = get_task_spec("synthetic")
    pool = cache.pool(spec, "train", "cpu")
    assert cache.pool(spec, "train", torch.device("cpu")) is pool and len(pool) == 5000
    assert cache.get(spec, "train", "cpu") is pool  # uncapped: the whole split
    assert cache.get(spec, "train", "cpu", 5000) is pool and cache.get(spec, "train", "cpu", 10**6) is pool
    assert cache.pool(spec, "val", "cpu") is not pool and len(cache.pool(spec, "val", "cpu")) == 2000
    assert len(cache.pool(spec, "test", "cpu")) == 2000
    assert DataCache(DataOptions()).pool(spec, "train", "cpu") is not pool  # caches are owned per run
    with pytest.raises(ValueError, match="Unknown split 'dev'"):
        cache.pool(spec, "dev", "cpu")


def test_data_cache_loads_each_split_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`preload` loads the requested splits (train and val by default); capped gets draw from the loaded pools."""
    loaded: list[str] = []
    dataset = tasks.TaskSpec.dataset

    def recording(self: tasks.TaskSpec, options: DataOptions, split: readers.Split, device: torch.device | str
                  ) -> DeviceDataset:
        loaded.append(split)
        return dataset(self, options, split, device)

    monkeypatch.setattr(tasks.TaskSpec, "dataset", recording)
    cache = DataCache(DataOptions())
    spec = get_task_spec("synthetic")
    cache.preload(spec, [torch.device("cpu")])
    assert loaded == ["train", "val"]
    cache.preload(spec, [torch.device("cpu")], ("val", "test"))
    cache.get(spec, "test", "cpu", 10, seed=0)
    cache.get(spec, "train", "cpu", 10, seed=1)
    assert loaded == ["train", "val", "test"]


def test_capped_get_is_the_subset_its_seed_draws() -> None:
    """A cap draws a random subset (not a prefix) from the data seed: the same seed gives the same samples, another
    seed other samples, and the draw is keyed by split."""
    cache = DataCache(DataOptions())
    spec = get_task_spec("synthetic")
    pool = cache.pool(spec, "train", "cpu")
    a = cache.get(spec, "train", "cpu", 40, seed=1)
    indices = draw_subset(5000, 40, derive_seed(1, "subset", "train"))
    assert len(a) == 40 and torch.equal(a.inputs, pool.inputs[indices])
    assert torch.equal(a.targets, pool.targets[indices])
    again = cache.get(spec, "train", torch.device("cpu"), 40, seed=1)
    assert torch.equal(again.inputs, a.inputs) and torch.equal(again.targets, a.targets)
    other = cache.get(spec, "train", "cpu", 40, seed=2)
    assert not torch.equal(other.inputs, a.inputs)
    assert not torch.equal(a.inputs, pool.inputs[:40])  # not a prefix
    smaller = cache.get(spec, "train", "cpu", 20, seed=1)
    assert len(smaller) == 20
    val_indices = draw_subset(2000, 40, derive_seed(1, "subset", "val"))
    val = cache.get(spec, "val", "cpu", 40, seed=1)
    assert torch.equal(val.inputs, cache.pool(spec, "val", "cpu").inputs[val_indices])
    with pytest.raises(ValueError, match="data seed"):
        cache.get(spec, "train", "cpu", 40)
    with pytest.raises(ValueError, match=">= 1"):
        cache.get(spec, "train", "cpu", 0, seed=1)


def test_draw_subset_distinct_sorted_deterministic() -> None:
    indices = draw_subset(100, 30, 7)
    assert indices.dtype == torch.int64 and indices.shape == (30,)
    assert indices.tolist() == sorted(set(indices.tolist())) and int(indices.min()) >= 0 and int(indices.max()) < 100
    assert torch.equal(indices, draw_subset(100, 30, 7)) and not torch.equal(indices, draw_subset(100, 30, 8))
    assert draw_subset(10, 10, 3).tolist() == list(range(10))


def test_synthetic_is_deterministic_per_split() -> None:
    spec = get_task_spec("synthetic")
    options = DataOptions()
    x1, y1 = spec.load(options, "val")
    x2, y2 = spec.load(options, "val")
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.shape == (2000, 3, 32, 32) and y1.shape == (2000,) and y1.dtype == torch.int64
    xt, _ = spec.load(options, "test")
    assert xt.shape == x1.shape and not torch.equal(xt, x1)


def test_synthetic_text_windows() -> None:
    spec = get_task_spec("synthetic_text")
    windows = spec.load(DataOptions(), "train")
    assert isinstance(windows, TokenWindows) and windows.tail is None
    assert windows.inputs.shape == windows.targets.shape and windows.inputs.shape[1] == 64
    assert torch.equal(windows.inputs[:, 1:], windows.targets[:, :-1])  # next-token shift
    again = spec.load(DataOptions(), "train")
    assert isinstance(again, TokenWindows) and torch.equal(again.inputs, windows.inputs)


def test_capped_lm_split_drops_its_tail() -> None:
    cache = DataCache(DataOptions())
    spec = get_task_spec("synthetic_text")
    pool = cache.pool(spec, "val", "cpu")
    assert pool.tail is not None
    capped = cache.get(spec, "val", "cpu", 5, seed=3)
    indices = draw_subset(pool.num_full, 5, derive_seed(3, "subset", "val"))
    assert len(capped) == 5 and capped.tail is None and torch.equal(capped.inputs, pool.inputs[indices])
    assert cache.get(spec, "val", "cpu", pool.num_full, seed=3) is pool  # uncapped in effect: the tail stays


def test_missing_cifar_names_path_and_download(tmp_path: Path) -> None:
    for name in ("cifar10", "cifar10_deep"):
        with pytest.raises(DatasetNotFoundError) as info:
            get_task_spec(name).load(DataOptions(data_dir=tmp_path), "train")
        message = str(info.value)
        assert str(tmp_path / "cifar-10-batches-py") in message and "--download" in message
    for split in ("val", "test"):
        with pytest.raises(DatasetNotFoundError):
            DataCache(DataOptions(data_dir=tmp_path)).get(get_task_spec("cifar10"), split, "cpu")


def test_missing_fashion_mnist_raises_without_system_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = tmp_path / "no-system-dir"
    monkeypatch.setattr(builtin_tasks, "load_fashion_mnist",
                        functools.partial(readers.load_fashion_mnist, system_dir=absent))
    with pytest.raises(DatasetNotFoundError) as info:
        get_task_spec("fashion_mnist").load(DataOptions(data_dir=tmp_path / "data"), "train")
    message = str(info.value)
    assert "fashion_mnist" in message and "dataset-fashion-mnist" in message
    assert str(tmp_path / "data" / "fashion-mnist") in message and str(absent) in message
    assert info.value.task == "fashion_mnist"
