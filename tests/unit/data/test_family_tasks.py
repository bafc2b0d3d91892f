"""An instance type's task: its images corrupted each from its own seed (the same whatever else is in the split, on
every call), its first classes only, its host at the type's width, and `family:KEY/TYPE` resolving to it."""

from __future__ import annotations

import pytest
import torch

from esper.data.corruptions import CORRUPTIONS, corrupt
from esper.data.families import Family, InstanceType, get_family
from esper.data.family_tasks import instance_images
from esper.data.synthetic import _chunk
from esper.data.tasks import get_task_spec
from esper.leyline import UserInputError
from esper.leyline.seeding import derive_seed

SYNTHETIC = get_family("synthetic-shift-v1")


def _family(itype: InstanceType) -> Family:
    return Family("probe", 1, "synthetic", (itype, InstanceType("other", "synthetic", 256)), held_out=("other",))


def _split(dtype: torch.dtype, n: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (n, 1, 8, 8), generator=g, dtype=torch.uint8)
    return (images if dtype == torch.uint8 else images.float() / 255.0 * 2 - 0.5), torch.arange(n) % 4


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_every_transform_is_deterministic_per_image_seed(name: str, dtype: torch.dtype) -> None:
    itype = InstanceType("t", "synthetic", 256, corruption=(name, 3))
    family = _family(itype)
    images, labels = _split(dtype)
    out, out_labels = instance_images(family, itype, "val", images, labels)
    assert out.dtype == dtype and out.shape == images.shape and torch.equal(out_labels, labels)
    assert torch.equal(out, instance_images(family, itype, "val", images, labels)[0])  # every call, the same bits
    assert not torch.equal(out, images)
    for i in (0, 5, 11):  # each image alone, from its own seed, is corrupted exactly as within the split
        seed = derive_seed(family.key, itype.name, "val", i)
        alone = images[i:i + 1].float() / 255.0 if dtype == torch.uint8 else images[i:i + 1]
        alone = corrupt(alone, name, 3, [seed])
        if dtype == torch.uint8:
            alone = alone.clamp(0, 1).mul(255).round().to(torch.uint8)
        assert torch.equal(alone, out[i:i + 1])
    # another split draws other seeds for the same images
    assert not torch.equal(instance_images(family, itype, "test", images, labels)[0], out)


def test_fewer_classes_keep_the_first_ones_and_each_image_its_own_seed() -> None:
    itype = InstanceType("t", "synthetic", 256, corruption=("gaussian_noise", 2), classes=2)
    family = _family(itype)
    images, labels = _split(torch.float32)
    out, kept = instance_images(family, itype, "train", images, labels)
    assert kept.tolist() == [0, 1, 0, 1, 0, 1]
    whole = instance_images(family, InstanceType("t", "synthetic", 256, corruption=("gaussian_noise", 2)), "train",
                            images, labels)[0]
    assert torch.equal(out, whole[labels < 2])  # an image's corruption does not depend on which classes are kept


def test_without_jitter_the_synthetic_images_keep_their_content_and_labels() -> None:
    jittered, labels = _chunk(0, "val", 0, True)
    steady, steady_labels = _chunk(0, "val", 0, False)
    assert torch.equal(labels, steady_labels) and not torch.equal(jittered, steady)
    # per image, the jittered one is the steady one up to a contrast of its content and a brightness per channel
    assert (steady.mean(dim=(2, 3)) - jittered.mean(dim=(2, 3))).abs().mean() > 0.05


def test_a_type_task_builds_on_its_base_at_the_types_width_and_classes() -> None:
    base = get_task_spec("synthetic")
    narrow = get_task_spec("family:synthetic-shift-v1/narrow-2k")
    steady = get_task_spec("family:synthetic-shift-v1/steady-4c")

    def params(task_host: torch.nn.Module) -> int:
        return sum(p.numel() for p in task_host.parameters())

    assert params(narrow.host_factory()) == params(base.host_factory(0.5))
    assert params(narrow.host_factory(2.0)) == params(base.host_factory(1.0))  # static:2 on a width-0.5 type
    assert steady.num_outputs == 4 and steady.host_factory()(torch.zeros(2, 3, 32, 32)).shape == (2, 4)
    assert narrow.source is not None and "width 0.5" in narrow.source


@pytest.mark.parametrize(("name", "message"), [
    ("family:synthetic-shift-v1", "names no type"),
    ("family:synthetic-shift-v9/clean", "Unknown family"),
    ("family:synthetic-shift-v1/nope", "has no type 'nope'"),
])
def test_bad_family_task_names_say_what_to_write(name: str, message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        get_task_spec(name)
