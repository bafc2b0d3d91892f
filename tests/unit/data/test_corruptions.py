"""MNIST-C-style corruptions: deterministic per image seed (whatever else is in the batch), the right shape, and each
one really changes the images, more at a higher severity."""

from __future__ import annotations

import pytest
import torch

from esper.data.corruptions import CORRUPTIONS, corrupt
from esper.leyline import UserInputError


def _images(n: int = 6, c: int = 3, size: int = 16) -> torch.Tensor:
    return torch.rand(n, c, size, size, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_each_image_is_corrupted_by_its_own_seed_alone(name: str, channels: int) -> None:
    images, seeds = _images(n=12, c=channels, size=8 * channels), list(range(11, 23))
    whole = corrupt(images, name, 3, seeds)
    assert whole.shape == images.shape and torch.isfinite(whole).all()
    assert torch.equal(whole, corrupt(images, name, 3, seeds))  # the same call, the same bits
    # an image corrupted alone, or beside other images in another order, is corrupted exactly the same way
    for order in ([4, 0, 5], [7]):
        assert torch.equal(corrupt(images[order], name, 3, [seeds[i] for i in order]), whole[order])
    assert not torch.equal(corrupt(images, name, 3, [s + 100 for s in seeds]), whole)  # another seed, another draw


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_a_higher_severity_changes_the_images_more(name: str) -> None:
    images, seeds = _images(n=32), list(range(32))
    mild = (corrupt(images, name, 1, seeds) - images).abs().mean()
    severe = (corrupt(images, name, 5, seeds) - images).abs().mean()
    assert 0 < mild < severe


def test_bad_names_and_severities_are_refused() -> None:
    with pytest.raises(UserInputError, match="Available"):
        corrupt(_images(), "snow", 1, range(6))
    with pytest.raises(UserInputError, match="severity"):
        corrupt(_images(), "blur", 6, range(6))
