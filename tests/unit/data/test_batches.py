"""DeviceDataset, on-device augmentation and SharedBatchIterator, with two CPU consumers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from esper.data.batches import (
    Augmentation,
    AugmentDraw,
    DeviceDataset,
    SharedBatchIterator,
    apply_augmentation,
)
from esper.data.readers import make_windows
from esper.leyline.seeding import derive_seed


def _images(n: int, size: int = 32, channels: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    x = torch.randint(0, 256, (n, channels, size, size), generator=g, dtype=torch.uint8)
    return x, torch.arange(n) % 10


def _pair(n: int) -> dict[str, DeviceDataset]:
    """Two consumers on the CPU under different keys, standing in for two devices."""
    x, y = _images(n, size=8)
    return {"a": DeviceDataset(x, y, "cpu"), "b": DeviceDataset(x, y, "cpu")}


def _reference(image: torch.Tensor, pad: int, dy: int, dx: int, flip: bool) -> torch.Tensor:
    h, w = image.shape[-2:]
    out = F.pad(image, (pad, pad, pad, pad))[:, dy : dy + h, dx : dx + w]
    return out.flip(-1) if flip else out


@pytest.mark.parametrize(("size", "dtype"), [(32, torch.uint8), (28, torch.float32)])
def test_augmentation_matches_pad_crop_flip(size: int, dtype: torch.dtype) -> None:
    images = torch.randint(1, 256, (16, 3, size, size)).to(dtype)
    augmentation = Augmentation.for_image_size(size)
    draw = augmentation.draw(16, torch.Generator().manual_seed(0))
    out = apply_augmentation(images, draw)
    assert out.dtype == dtype and out.shape == images.shape
    for i in range(16):
        dy, dx = draw.offsets[i].tolist()
        expected = _reference(images[i], draw.padding, dy, dx, bool(draw.flips[i]))
        assert torch.equal(out[i], expected), i
    assert draw.flips.any() and not draw.flips.all()


def test_augmentation_extremes() -> None:
    image = torch.arange(1, 17, dtype=torch.float32).view(1, 1, 4, 4)
    corner = AugmentDraw(2, torch.tensor([[0, 0]]), torch.tensor([False]))
    out = apply_augmentation(image, corner)[0, 0]
    assert out[:2].eq(0).all() and out[:, :2].eq(0).all() and out[2:, 2:].tolist() == [[1, 2], [5, 6]]
    centre_flip = AugmentDraw(2, torch.tensor([[2, 2]]), torch.tensor([True]))
    assert torch.equal(apply_augmentation(image, centre_flip), image.flip(-1))


def test_standard_paddings() -> None:
    assert Augmentation.for_image_size(32) == Augmentation(4, horizontal_flip=True)
    assert Augmentation.for_image_size(28).crop_padding == 2
    assert Augmentation.for_image_size(16).crop_padding == 2  # an eighth of the side at any other size
    assert Augmentation.for_image_size(64).crop_padding == 8
    with pytest.raises(ValueError, match=">= 1 pixel"):
        Augmentation.for_image_size(0)
    no_flip = Augmentation(4, horizontal_flip=False).draw(50, torch.Generator().manual_seed(1))
    assert not no_flip.flips.any()


def test_device_dataset_normalizes_uint8() -> None:
    x, y = _images(4, size=8)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.5)
    dataset = DeviceDataset(x, y, "cpu", (mean, std))
    bx, by = dataset.batch(torch.tensor([2, 0]))
    expected = (x[[2, 0]].float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    assert bx.dtype == torch.float32 and torch.allclose(bx, expected) and by.tolist() == [2, 0]
    floats = torch.randn(4, 3, 8, 8)
    assert torch.equal(DeviceDataset(floats, y, "cpu").batch(torch.tensor([1]))[0], floats[[1]])
    assert dataset.inputs.dtype == torch.uint8  # stays one byte per pixel on the device


def test_subset_keeps_the_chosen_samples_and_conversion() -> None:
    x, y = _images(10, size=8)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.5)
    dataset = DeviceDataset(x, y, "cpu", (mean, std))
    subset = dataset.subset(torch.tensor([1, 4, 9]))
    assert len(subset) == 3 and subset.device == dataset.device and subset.normalization == dataset.normalization
    assert torch.equal(subset.inputs, x[[1, 4, 9]]) and subset.targets.tolist() == [1, 4, 9]
    bx, by = subset.batch(torch.tensor([2, 0]))
    ex, ey = dataset.batch(torch.tensor([9, 1]))
    assert torch.equal(bx, ex) and torch.equal(by, ey)  # normalized exactly as the pool's samples
    windows = make_windows(torch.arange(30), 8, keep_tail=True)
    lm = DeviceDataset.from_windows(windows, "cpu")
    assert lm.tail is not None and len(lm) == 4
    lm_subset = lm.subset(torch.tensor([0, 2]))
    assert lm_subset.tail is None and len(lm_subset) == 2  # the tail is not a sample a subset can hold
    assert torch.equal(lm_subset.inputs, windows.inputs[[0, 2]])
    assert torch.equal(lm_subset.targets, windows.targets[[0, 2]])


def test_device_dataset_validation() -> None:
    x, y = _images(4)
    with pytest.raises(ValueError, match="samples"):
        DeviceDataset(x, y[:3], "cpu")
    with pytest.raises(ValueError, match="per channel"):
        DeviceDataset(x, y, "cpu", ((0.5,), (0.5,)))
    tokens = torch.zeros(4, 8, dtype=torch.int64)
    with pytest.raises(ValueError, match="normalization"):
        DeviceDataset(tokens, tokens, "cpu", ((0.5,), (0.5,)))


def test_same_indices_and_tensors_for_every_consumer() -> None:
    iterator = SharedBatchIterator(_pair(50), 16, shuffle=True, seed=3, augment=Augmentation(2))
    for batch in iterator:
        assert set(batch) == {"a", "b"}
        xa, ya = batch["a"]
        xb, yb = batch["b"]
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert torch.equal(ya, batch.indices % 10)


def test_augmentation_changes_inputs() -> None:
    datasets = _pair(64)
    plain = SharedBatchIterator(datasets, 64, shuffle=True, seed=5)
    augmented = SharedBatchIterator(datasets, 64, shuffle=True, seed=5, augment=Augmentation(2))
    (p,), (a,) = list(plain), list(augmented)
    assert torch.equal(p.indices, a.indices)
    assert not torch.equal(p["a"][0], a["a"][0])
    changed = (p["a"][0] != a["a"][0]).flatten(1).any(1).float().mean()
    assert changed > 0.8


def test_full_epoch_coverage_and_partial_batch() -> None:
    iterator = SharedBatchIterator(_pair(10), 4, shuffle=True, seed=0)
    batches = list(iterator)
    assert [b.size for b in batches] == [4, 4, 2] and len(iterator) == 3
    assert sorted(torch.cat([b.indices for b in batches]).tolist()) == list(range(10))


def test_train_drops_only_a_single_sample_tail() -> None:
    iterator = SharedBatchIterator(_pair(9), 4, shuffle=True, seed=0)
    batches = list(iterator)
    assert [b.size for b in batches] == [4, 4] and len(iterator) == 2
    assert len(set(torch.cat([b.indices for b in batches]).tolist())) == 8


def test_validation_fixed_order_keeps_everything() -> None:
    iterator = SharedBatchIterator(_pair(9), 4, shuffle=False)
    first, second = list(iterator), list(iterator)
    assert [b.size for b in first] == [4, 4, 1] and len(iterator) == 3
    assert torch.cat([b.indices for b in first]).tolist() == list(range(9))
    assert all(torch.equal(p["a"][0], q["a"][0]) for p, q in zip(first, second))


def test_order_deterministic_per_seed() -> None:
    def order(seed: int) -> list[int]:
        iterator = SharedBatchIterator(_pair(40), 8, shuffle=True, seed=seed, augment=Augmentation(2))
        return torch.cat([b.indices for b in iterator]).tolist()

    assert order(1) == order(1) and order(1) != order(2)
    iterator = SharedBatchIterator(_pair(40), 40, shuffle=True, seed=1, augment=Augmentation(2))
    epoch_a = next(iter(iterator))
    iterator.set_seed(derive_seed(1, 0, 1))
    epoch_b = next(iter(iterator))
    assert epoch_a.indices.tolist() != epoch_b.indices.tolist()
    iterator.set_seed(1)
    assert torch.equal(next(iter(iterator))["a"][0], epoch_a["a"][0])  # same order and augmentations


def test_derive_seed_stable_and_distinct() -> None:
    assert derive_seed(42, 0, 1) == derive_seed(42, 0, 1)
    assert len({derive_seed(42, b, e) for b in range(5) for e in range(5)}) == 25
    assert 0 <= derive_seed(-1, "val") < 2**63


def test_lm_validation_serves_tail_last() -> None:
    windows = make_windows(torch.arange(30), 8, keep_tail=True)
    datasets = {"a": DeviceDataset.from_windows(windows, "cpu"), "b": DeviceDataset.from_windows(windows, "cpu")}
    iterator = SharedBatchIterator(datasets, 2, shuffle=False)
    batches = list(iterator)
    assert len(iterator) == len(batches) == 3 and [b.size for b in batches] == [2, 1, 1]
    tail_x, tail_y = batches[-1]["b"]
    assert tail_x.tolist() == [[24, 25, 26, 27, 28]] and tail_y.tolist() == [[25, 26, 27, 28, 29]]
    assert batches[0]["a"][0].dtype == torch.int64 and batches[0]["a"][0].shape == (2, 8)
    with pytest.raises(ValueError, match="tail"):
        SharedBatchIterator(datasets, 2, shuffle=True, seed=0)


def test_iterator_validation() -> None:
    x, y = _images(10)
    with pytest.raises(ValueError, match="same samples"):
        unequal = {"a": DeviceDataset(x, y, "cpu"), "b": DeviceDataset(x[:9], y[:9], "cpu")}
        SharedBatchIterator(unequal, 4, shuffle=False)
    with pytest.raises(ValueError, match="seed"):
        SharedBatchIterator(_pair(10), 4, shuffle=True)
    tokens = DeviceDataset(torch.zeros(4, 8, dtype=torch.int64), torch.zeros(4, 8, dtype=torch.int64), "cpu")
    with pytest.raises(ValueError, match="images"):
        SharedBatchIterator({"a": tokens}, 2, shuffle=True, seed=0, augment=Augmentation(2))
    with pytest.raises(ValueError, match="batch_size"):
        SharedBatchIterator(_pair(10), 0, shuffle=False)
