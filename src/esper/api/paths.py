"""Which modules of a model become slots, and which blueprints fit a slot's output.

Slots are named the way PEFT names `target_modules`: a module path exactly, a dotted suffix of one (`layer2` names
`backbone.layer2`), or else a regular expression matched against whole paths. They are ordered as the model
registers its modules and take the canonical slot names in that order (the first is `early`), so a controller sees
a user's model as it sees esper's own hosts: at most three slots, early to late.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from torch import nn

from esper.leyline import CANONICAL_SLOTS
from esper.leyline.errors import UserInputError, did_you_mean

__all__ = ["MAX_SLOTS", "resolve_slot_paths", "topology_of"]

MAX_SLOTS = len(CANONICAL_SLOTS)
_LISTED = 40  # module paths an error lists before it only counts the rest

TOPOLOGIES = {4: "cnn", 3: "transformer"}
"""Blueprint topology per activation rank: a (B, C, H, W) feature map, or (B, T, D) tokens, batch first."""


def _listing(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:_LISTED])
    return shown if len(paths) <= _LISTED else f"{shown}, … ({len(paths) - _LISTED} more)"


def _matches(pattern: str, paths: Sequence[str]) -> list[str]:
    """Paths `pattern` names exactly or as a dotted suffix; failing that, the paths it matches as a whole regex."""
    named = [p for p in paths if p == pattern or p.endswith("." + pattern)]
    if named:
        return named
    try:
        regex = re.compile(pattern)
    except re.error:
        return []
    return [p for p in paths if regex.fullmatch(p)]


def resolve_slot_paths(model: nn.Module, patterns: Sequence[str]) -> tuple[str, ...]:
    """The module paths `patterns` name, in the model's module order. A pattern that names nothing is refused with
    the paths that exist; so are more than three slots, and a slot inside another (their hooks would compose)."""
    if isinstance(patterns, str):
        raise UserInputError(f"slots must be a list of module paths or patterns, got the string {patterns!r}: "
                             f"write slots=[{patterns!r}]")
    if not patterns:
        raise UserInputError(f"Name at least one slot: slots=[...] takes module paths of the model, e.g. "
                             f"{_listing([p for p, _ in model.named_modules() if p][:3])}")
    paths = [p for p, _ in model.named_modules() if p]
    matched: set[str] = set()
    for pattern in patterns:
        hits = _matches(pattern, paths)
        if not hits:
            raise UserInputError(f"Slot {pattern!r} matches no module of {type(model).__name__}"
                                 f"{did_you_mean(pattern, paths)}. Its module paths: {_listing(paths)}")
        matched.update(hits)
    ordered = tuple(p for p in paths if p in matched)
    if len(ordered) > MAX_SLOTS:
        raise UserInputError(f"slots={list(patterns)} name {len(ordered)} modules ({', '.join(ordered)}), but a model "
                             f"grows in at most {MAX_SLOTS} slots ({', '.join(CANONICAL_SLOTS)}): name fewer")
    for outer in ordered:
        inner = [p for p in ordered if p.startswith(outer + ".")]
        if inner:
            raise UserInputError(f"Slot {inner[0]!r} lies inside slot {outer!r}: name modules that do not contain "
                                 f"each other")
    return ordered


def topology_of(shape: Sequence[int], path: str) -> str:
    """The blueprint topology whose modules fit an activation of `shape`, refusing shapes no blueprint fits."""
    topology = TOPOLOGIES.get(len(shape))
    if topology is None:
        raise UserInputError(f"Slot {path!r} outputs shape {tuple(shape)}: no blueprint fits it (cnn blueprints take "
                             f"(B, C, H, W), transformer blueprints (B, T, D), batch first); name a module that "
                             f"outputs one of those")
    return topology
