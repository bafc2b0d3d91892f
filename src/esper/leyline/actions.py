"""Factored actions, the action space of each topology, the joint action index and the pure validity rules.

Heads (op, slot, blueprint, blend) are factored; there is no flat action enum. The blueprint head is not fixed here:
an `ActionSpace` is built from the blueprints registered for a topology (`esper.kasmina.register_blueprint`), and
every size follows from it. `compute_action_validity` is the one
set of rules shared by policy masks, the heuristic, the random controller and the environment's execution checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from esper.leyline.constants import (
    CANONICAL_SLOTS,
    MIN_CULL_AGE,
    NUM_BLENDS,
    NUM_OPS,
    NUM_SLOTS,
)
from esper.leyline.errors import UserInputError
from esper.leyline.stages import SeedStage

__all__ = [
    "BLEND_IDS",
    "CANONICAL_SLOTS",
    "NOOP_BLUEPRINT",
    "UNRECORDED_HEADS",
    "ActionSpace",
    "ActionValidity",
    "BlendAction",
    "FactoredAction",
    "LifecycleCommand",
    "LifecycleOp",
    "MaskSeedInfo",
    "SlotAction",
    "compute_action_validity",
    "ordered_slots",
]


def ordered_slots(enabled: Iterable[str]) -> tuple[str, ...]:
    """The single slot-ordering function: canonical order (early, mid, late) filtered to `enabled`."""
    names = list(enabled)
    unknown = [n for n in names if n not in CANONICAL_SLOTS]
    if unknown:
        raise UserInputError(f"Unknown slot(s): {unknown}. Available: {list(CANONICAL_SLOTS)}")
    if len(set(names)) != len(names):
        raise UserInputError(f"Duplicate slot names in {names}")
    present = set(names)
    return tuple(s for s in CANONICAL_SLOTS if s in present)


class SlotAction(IntEnum):
    EARLY = 0
    MID = 1
    LATE = 2

    def to_slot_id(self) -> str:
        return CANONICAL_SLOTS[self.value]

    @classmethod
    def from_slot_id(cls, slot_id: str) -> SlotAction:
        if slot_id not in CANONICAL_SLOTS:
            raise UserInputError(f"Unknown slot: {slot_id}. Available: {list(CANONICAL_SLOTS)}")
        return cls(CANONICAL_SLOTS.index(slot_id))


BLEND_IDS: tuple[str, ...] = ("linear", "sigmoid", "gated")


class BlendAction(IntEnum):
    LINEAR = 0
    SIGMOID = 1
    GATED = 2

    def to_algorithm_id(self) -> str:
        return BLEND_IDS[self.value]

    @classmethod
    def from_algorithm_id(cls, blend_id: str) -> BlendAction:
        if blend_id not in BLEND_IDS:
            raise UserInputError(f"Unknown blend '{blend_id}'. Available: {list(BLEND_IDS)}")
        return cls(BLEND_IDS.index(blend_id))


class LifecycleOp(IntEnum):
    WAIT = 0
    GERMINATE = 1
    CULL = 2
    FOSSILIZE = 3


@dataclass(frozen=True, slots=True)
class LifecycleCommand:
    """What an environment executes. Slot is None only for WAIT; blueprint/blend only for GERMINATE."""

    op: LifecycleOp
    slot_id: str | None = None
    blueprint_id: str | None = None
    blend_id: str | None = None

    def __post_init__(self) -> None:
        if self.op == LifecycleOp.WAIT:
            if self.slot_id is not None or self.blueprint_id is not None or self.blend_id is not None:
                raise ValueError("WAIT carries no slot, blueprint or blend")
            return
        if self.slot_id is None:
            raise ValueError(f"{self.op.name} needs a slot_id")
        if self.op == LifecycleOp.GERMINATE:
            if self.blueprint_id is None or self.blend_id is None:
                raise ValueError("GERMINATE needs blueprint_id and blend_id")
        elif self.blueprint_id is not None or self.blend_id is not None:
            raise ValueError(f"{self.op.name} carries no blueprint or blend")

    def describe(self) -> str:
        if self.op == LifecycleOp.WAIT:
            return "WAIT"
        if self.op == LifecycleOp.GERMINATE:
            return f"GERMINATE {self.slot_id} {self.blueprint_id}/{self.blend_id}"
        return f"{self.op.name} {self.slot_id}"


NOOP_BLUEPRINT = "noop"
"""Index 0 of every blueprint head: the placeholder a non-GERMINATE action carries, never a germination."""

UNRECORDED_HEADS: dict[str, tuple[str, ...]] = {
    "cnn": (NOOP_BLUEPRINT, "conv_light", "attention", "norm", "depthwise"),
    "transformer": (NOOP_BLUEPRINT, "lora", "attention", "norm", "mlp"),
}
"""The heads of policy checkpoints and datasets written before they recorded their blueprint head: the built-in
blueprints, the only ones there were then. Only readers of such files use this."""


@dataclass(frozen=True, slots=True)
class ActionSpace:
    """The action space of one topology, derived from its registered blueprints.

    `head` is the blueprint head of learned policies: "noop" first, then every blueprint a policy may choose, in
    registration order; `others` are blueprints registered outside the head (`fixed:`, `grow:` and scripted rules may
    build them, a policy never chooses them). Every size (the blueprint head, the joint actions, the observation's
    blueprint one-hots) follows from `head`, so registering a blueprint needs no count changed anywhere.
    """

    topology: str
    head: tuple[str, ...]
    others: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.head) < 2 or self.head[0] != NOOP_BLUEPRINT:
            raise UserInputError(f"The {self.topology} blueprint head must be '{NOOP_BLUEPRINT}' followed by at least "
                                 f"one blueprint, got {list(self.head)}: register a blueprint for '{self.topology}'")
        names = self.head + self.others
        if len(set(names)) != len(names):
            raise UserInputError(f"Blueprint names repeat in {list(names)}: give each blueprint one name")

    @property
    def num_blueprints(self) -> int:
        return len(self.head)

    @property
    def buildable(self) -> tuple[str, ...]:
        """Every blueprint a module can be built from: the head's (less noop) and the others."""
        return self.head[1:] + self.others

    @property
    def num_joint_actions(self) -> int:
        """WAIT, GERMINATE per (slot, head blueprint but noop, blend), CULL and FOSSILIZE per slot."""
        return self._fossilize_base + NUM_SLOTS

    @property
    def _germinate_per_slot(self) -> int:
        return (self.num_blueprints - 1) * NUM_BLENDS

    @property
    def _cull_base(self) -> int:
        return 1 + NUM_SLOTS * self._germinate_per_slot

    @property
    def _fossilize_base(self) -> int:
        return self._cull_base + NUM_SLOTS

    def blueprint_id(self, index: int) -> str:
        if not 0 <= index < self.num_blueprints:
            raise ValueError(f"blueprint index {index} out of range [0, {self.num_blueprints})")
        return self.head[index]

    def blueprint_index(self, blueprint_id: str) -> int | None:
        """Head index of a blueprint, or None when the blueprint is outside the head."""
        return self.head.index(blueprint_id) if blueprint_id in self.head else None

    def action(self, slot: int, blueprint: int, blend: int, op: int) -> FactoredAction:
        """The factored action of head indices, each checked against its head's size."""
        for name, value, size in (
            ("slot", slot, NUM_SLOTS),
            ("blueprint", blueprint, self.num_blueprints),
            ("blend", blend, NUM_BLENDS),
            ("op", op, NUM_OPS),
        ):
            if not 0 <= int(value) < size:
                raise ValueError(f"{name} index {value} out of range [0, {size})")
        return FactoredAction(SlotAction(slot), int(blueprint), BlendAction(blend), LifecycleOp(op))

    def joint_index(self, action: FactoredAction) -> int:
        """Index of a factored action among the joint actions (IQL, datasets, the Gymnasium action)."""
        if action.op == LifecycleOp.WAIT:
            return 0
        s = int(action.slot)
        if action.op == LifecycleOp.GERMINATE:
            if action.blueprint == 0:
                raise ValueError("GERMINATE with the noop blueprint has no joint index")
            return 1 + self._germinate_per_slot * s + NUM_BLENDS * (action.blueprint - 1) + int(action.blend)
        if action.op == LifecycleOp.CULL:
            return self._cull_base + s
        return self._fossilize_base + s

    def from_joint_index(self, index: int) -> FactoredAction:
        """Inverse of `joint_index`; placeholders (index 0) fill the heads an op does not use."""
        if not 0 <= index < self.num_joint_actions:
            raise ValueError(f"joint index {index} out of range [0, {self.num_joint_actions})")
        if index == 0:
            return self.action(0, 0, 0, LifecycleOp.WAIT)
        if index < self._cull_base:
            s, rest = divmod(index - 1, self._germinate_per_slot)
            b, blend = divmod(rest, NUM_BLENDS)
            return self.action(s, b + 1, blend, LifecycleOp.GERMINATE)
        if index < self._fossilize_base:
            return self.action(index - self._cull_base, 0, 0, LifecycleOp.CULL)
        return self.action(index - self._fossilize_base, 0, 0, LifecycleOp.FOSSILIZE)


@dataclass(frozen=True, slots=True)
class FactoredAction:
    """One choice per head. Heads irrelevant to the op carry placeholders (index 0); `blueprint` indexes the
    topology's blueprint head (`ActionSpace.head`)."""

    slot: SlotAction
    blueprint: int
    blend: BlendAction
    op: LifecycleOp

    @property
    def is_germinate(self) -> bool:
        return self.op == LifecycleOp.GERMINATE

    @property
    def slot_id(self) -> str:
        return self.slot.to_slot_id()

    @property
    def blend_algorithm_id(self) -> str:
        return self.blend.to_algorithm_id()

    def to_command(self, space: ActionSpace) -> LifecycleCommand:
        if self.op == LifecycleOp.WAIT:
            return LifecycleCommand(LifecycleOp.WAIT)
        if self.op == LifecycleOp.GERMINATE:
            if self.blueprint == 0:
                raise ValueError("GERMINATE with the noop blueprint is not an action")
            return LifecycleCommand(self.op, self.slot_id, space.blueprint_id(self.blueprint), self.blend_algorithm_id)
        return LifecycleCommand(self.op, self.slot_id)

    @classmethod
    def from_command(cls, cmd: LifecycleCommand, space: ActionSpace) -> FactoredAction | None:
        """Factored form of a command; None when its blueprint is outside the policy head."""
        if cmd.op == LifecycleOp.WAIT:
            return cls(SlotAction.EARLY, 0, BlendAction.LINEAR, LifecycleOp.WAIT)
        assert cmd.slot_id is not None
        slot = SlotAction.from_slot_id(cmd.slot_id)
        if cmd.op != LifecycleOp.GERMINATE:
            return cls(slot, 0, BlendAction.LINEAR, cmd.op)
        assert cmd.blueprint_id is not None and cmd.blend_id is not None
        blueprint = space.blueprint_index(cmd.blueprint_id)
        if blueprint is None or blueprint == 0:
            return None
        return cls(slot, blueprint, BlendAction.from_algorithm_id(cmd.blend_id), cmd.op)


@dataclass(frozen=True, slots=True)
class MaskSeedInfo:
    """What the validity rules need to know about a slot's seed."""

    stage: int
    seed_age_epochs: int
    fossilize_ready: bool = True


_CULLABLE = frozenset(
    {SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY}
)


@dataclass(frozen=True, slots=True)
class ActionValidity:
    """Joint validity of every head combination of `space`; slots are indexed in canonical order."""

    space: ActionSpace
    op_slot: tuple[tuple[bool, ...], ...]  # [NUM_OPS][NUM_SLOTS]
    op: tuple[bool, ...]  # [NUM_OPS]
    slot_blueprint: tuple[tuple[bool, ...], ...]  # [NUM_SLOTS][space.num_blueprints]
    blend: tuple[bool, ...]  # [NUM_BLENDS]

    def is_valid(self, action: FactoredAction) -> bool:
        if not self.op[action.op]:
            return False
        if action.op == LifecycleOp.WAIT:
            return True
        if not self.op_slot[action.op][action.slot]:
            return False
        if action.op == LifecycleOp.GERMINATE:
            return self.slot_blueprint[action.slot][action.blueprint] and self.blend[action.blend]
        return True

    def is_valid_command(self, cmd: LifecycleCommand) -> bool:
        """Validity of a command; germinating a blueprint outside the head needs only a valid slot and a blueprint
        the space can build (one of its `others`: a space restricted to some blueprints builds no other)."""
        if cmd.op == LifecycleOp.WAIT:
            return True
        assert cmd.slot_id is not None
        if cmd.slot_id not in CANONICAL_SLOTS or not self.op_slot[cmd.op][CANONICAL_SLOTS.index(cmd.slot_id)]:
            return False
        if cmd.op == LifecycleOp.GERMINATE and cmd.blueprint_id == NOOP_BLUEPRINT:
            return False  # the noop blueprint is never a germination
        action = FactoredAction.from_command(cmd, self.space)
        return cmd.blueprint_id in self.space.others if action is None else self.is_valid(action)

    def restricted_to_blueprints(self, allowed: frozenset[int]) -> ActionValidity:
        """This validity for a controller that may germinate only the blueprint indices in `allowed`: the other
        blueprints become invalid, and so does GERMINATE in a slot (or anywhere) where none of `allowed` is valid."""
        slot_blueprint = tuple(tuple(ok and b in allowed for b, ok in enumerate(row)) for row in self.slot_blueprint)
        germinate = tuple(ok and any(row) for ok, row in zip(self.op_slot[LifecycleOp.GERMINATE], slot_blueprint,
                                                             strict=True))
        op_slot = tuple(germinate if op == LifecycleOp.GERMINATE else row for op, row in zip(LifecycleOp, self.op_slot,
                                                                                            strict=True))
        op = tuple(any(germinate) if o == LifecycleOp.GERMINATE else ok for o, ok in zip(LifecycleOp, self.op,
                                                                                          strict=True))
        return ActionValidity(self.space, op_slot=op_slot, op=op, slot_blueprint=slot_blueprint, blend=self.blend)

    def valid_slots(self, op: LifecycleOp) -> tuple[str, ...]:
        return tuple(s for i, s in enumerate(CANONICAL_SLOTS) if self.op_slot[op][i])

    def joint_mask(self) -> tuple[bool, ...]:
        """Validity of each joint action of the space."""
        space = self.space
        return tuple(self.is_valid(space.from_joint_index(i)) for i in range(space.num_joint_actions))


def compute_action_validity(
    slot_states: Mapping[str, MaskSeedInfo | None],
    *,
    total_seeds: int = 0,
    max_seeds: int = 0,
    space: ActionSpace,
    embargoed: Iterable[str] = (),
) -> ActionValidity:
    """Apply the validity rules. Keys of `slot_states` are the enabled slots (None = empty)."""
    enabled = ordered_slots(slot_states.keys())
    blocked = set(embargoed)
    budget_full = max_seeds > 0 and total_seeds >= max_seeds
    germinate, cull, fossilize = [False] * NUM_SLOTS, [False] * NUM_SLOTS, [False] * NUM_SLOTS
    for slot in enabled:
        i = CANONICAL_SLOTS.index(slot)
        info = slot_states[slot]
        if info is None:
            germinate[i] = slot not in blocked and not budget_full
            continue
        stage = SeedStage(info.stage)
        cull[i] = stage in _CULLABLE and info.seed_age_epochs >= MIN_CULL_AGE
        fossilize[i] = stage == SeedStage.PROBATIONARY and info.fossilize_ready
    op_slot = ((False,) * NUM_SLOTS, tuple(germinate), tuple(cull), tuple(fossilize))
    op = (True, any(germinate), any(cull), any(fossilize))
    slot_blueprint = tuple(tuple(b != 0 for b in range(space.num_blueprints)) for _ in range(NUM_SLOTS))
    return ActionValidity(space, op_slot=op_slot, op=op, slot_blueprint=slot_blueprint, blend=(True,) * NUM_BLENDS)
