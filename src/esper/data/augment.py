"""Train-time augmentation as a declared choice: `none`, `crop`, `flip` or `crop,flip`.

A random horizontal flip or a shifted crop claims that the label survives it. esper's built-in image tasks make that
claim for their data (textures, photographs, clothing); data of your own makes none until you do (`--augment`, or
`augment=` of `image_task` and `arrays_task`), since a flip swaps the classes of images told apart by left and right,
and a crop can push a small object out of the picture. A run records the augmentation in force.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BeforeValidator

from esper.leyline.errors import UserInputError

__all__ = ["AUGMENTS", "Augment", "AugmentChoice", "augment_ops", "parse_augment"]

Augment = Literal["none", "crop", "flip", "crop,flip"]
"""Random crops (zero padding, an eighth of the image side), random horizontal flips, both, or neither."""
AUGMENTS: tuple[Augment, ...] = get_args(Augment)


def augment_ops(augment: Augment) -> frozenset[str]:
    """The operations an augmentation names (none: no operation)."""
    return frozenset() if augment == "none" else frozenset(augment.split(","))


_BY_OPS: dict[frozenset[str], Augment] = {augment_ops(augment): augment for augment in AUGMENTS}


def parse_augment(value: object) -> Augment:
    """`none`, or `crop` and `flip` in any order, as text (`"flip,crop"`) or a sequence of names, in canonical form."""
    if isinstance(value, str):
        parts = [part.strip() for part in value.split(",")]
    elif isinstance(value, list | tuple) and all(isinstance(part, str) for part in value):
        parts = list(value)
    else:
        parts = ["?"]
    found = _BY_OPS.get(frozenset() if parts == ["none"] else frozenset(parts))
    if found is None:
        raise UserInputError(f"augmentation {value!r} is not one of {', '.join(AUGMENTS)}: name crop (random crops), "
                             f"flip (random horizontal flips), both as crop,flip, or none")
    return found


AugmentChoice = Annotated[Augment, BeforeValidator(parse_augment)]
"""A config field's augmentation, accepting what `parse_augment` accepts (`--set augment=flip,crop`)."""
