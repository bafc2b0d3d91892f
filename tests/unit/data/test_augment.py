"""Augmentation as a declared choice: four names, any spelling of them canonical, and each doing exactly what it
names to an image of any size."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esper.data.augment import AUGMENTS, augment_ops, parse_augment
from esper.data.batches import Augmentation, apply_augmentation, describe_augmentation
from esper.simic.ppo.config import TrainingConfig


@given(ops=st.lists(st.sampled_from(["crop", "flip"]), max_size=4), spaces=st.booleans())
def test_any_spelling_of_crop_and_flip_is_one_canonical_name(ops: list[str], spaces: bool) -> None:
    text = (", " if spaces else ",").join(ops) if ops else "none"
    augment = parse_augment(text)
    assert augment in AUGMENTS and augment_ops(augment) == frozenset(ops)
    assert parse_augment(ops) == augment and parse_augment(augment) == augment


@pytest.mark.parametrize("bad", ["rotate", "crop,none", "", "crop;flip", 3, ["crop", 1]])
def test_anything_else_is_refused_naming_the_choices(bad: object) -> None:
    with pytest.raises(ValueError, match=r"is not one of none, crop, flip, crop,flip: name crop \(random crops\)"):
        parse_augment(bad)


def test_a_config_takes_the_same_spellings() -> None:
    assert TrainingConfig.from_dict({"task": "synthetic", "augment": "flip,crop"}).episode.augment == "crop,flip"
    assert TrainingConfig.from_dict({"task": "synthetic", "augment": []}).episode.augment == "none"
    assert TrainingConfig.from_dict({"task": "synthetic"}).episode.augment is None  # the task's own
    with pytest.raises(ValueError, match="augment: augmentation 'mirror' is not one of"):
        TrainingConfig.from_dict({"task": "synthetic", "augment": "mirror"})
    with pytest.raises(ValueError, match="Task 'synthetic_text' has no images to augment"):
        TrainingConfig.from_dict({"task": "synthetic_text", "augment": "flip"})


def test_each_name_does_what_it_says() -> None:
    assert Augmentation.named("none", 32) is None
    assert Augmentation.named("crop,flip", 32) == Augmentation.for_image_size(32)  # esper's own tasks: unchanged
    assert Augmentation.named("crop", 16) == Augmentation(2, horizontal_flip=False)
    assert Augmentation.named("crop", 7) is None  # an eighth of 7 px pads nothing: no crop at all
    flip = Augmentation.named("flip", 16)
    assert flip == Augmentation(0, horizontal_flip=True)
    assert flip is not None
    draw = flip.draw(64, torch.Generator().manual_seed(0))
    assert not draw.offsets.any() and 0 < int(draw.flips.sum()) < 64
    images = torch.arange(2 * 16).reshape(2, 1, 4, 4).to(torch.uint8)
    out = apply_augmentation(images, draw.__class__(0, draw.offsets[:2], torch.tensor([True, False])))
    assert torch.equal(out[0], images[0].flip(-1)) and torch.equal(out[1], images[1])  # a mirror image, no shift
    assert [describe_augmentation(Augmentation.named(a, 28)) for a in AUGMENTS] == [
        "none", "crop (padding 2)", "flip", "crop (padding 2), flip"]
