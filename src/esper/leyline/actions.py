"""Factored actions, the joint action index and the pure validity rules.

Heads (op, slot, blueprint, blend) are factored; there is no flat action enum. `compute_action_validity` is the one
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
    NUM_BLUEPRINTS,
    NUM_JOINT_ACTIONS,
    NUM_OPS,
    NUM_SLOTS,
)
from esper.leyline.errors import UserInputError
from esper.leyline.stages import SeedStage

__all__ = [
    "BLEND_IDS",
    "BLUEPRINT_HEAD",
    "CANONICAL_SLOTS",
    "ActionValidity",
    "BlendAction",
    "BlueprintAction",
    "FactoredAction",
    "LifecycleCommand",
    "LifecycleOp",
    "MaskSeedInfo",
    "SlotAction",
    "compute_action_validity",
    "from_joint_index",
    "joint_index",
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


BLUEPRINT_HEAD: dict[str, tuple[str, ...]] = {
    "cnn": ("noop", "conv_light", "attention", "norm", "depthwise"),
    "transformer": ("noop", "lora", "attention", "norm", "mlp"),
}


def _check_topology(topology: str) -> None:
    if topology not in BLUEPRINT_HEAD:
        raise UserInputError(f"Unknown topology '{topology}'. Available: {sorted(BLUEPRINT_HEAD)}")


class BlueprintAction(IntEnum):
    NOOP = 0
    CONV_LIGHT = 1
    ATTENTION = 2
    NORM = 3
    DEPTHWISE = 4

    def to_blueprint_id(self, topology: str = "cnn") -> str:
        _check_topology(topology)
        return BLUEPRINT_HEAD[topology][self.value]

    @classmethod
    def from_blueprint_id(cls, blueprint_id: str, topology: str = "cnn") -> BlueprintAction | None:
        """Head index of a blueprint, or None when the blueprint is outside the policy head."""
        _check_topology(topology)
        head = BLUEPRINT_HEAD[topology]
        return cls(head.index(blueprint_id)) if blueprint_id in head else None


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


@dataclass(frozen=True, slots=True)
class FactoredAction:
    """One choice per head. Heads irrelevant to the op carry placeholders (index 0)."""

    slot: SlotAction
    blueprint: BlueprintAction
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

    def blueprint_id(self, topology: str = "cnn") -> str:
        return self.blueprint.to_blueprint_id(topology)

    @classmethod
    def from_indices(cls, slot_idx: int, blueprint_idx: int, blend_idx: int, op_idx: int) -> FactoredAction:
        for name, value, size in (
            ("slot", slot_idx, NUM_SLOTS),
            ("blueprint", blueprint_idx, NUM_BLUEPRINTS),
            ("blend", blend_idx, NUM_BLENDS),
            ("op", op_idx, NUM_OPS),
        ):
            if not 0 <= int(value) < size:
                raise ValueError(f"{name} index {value} out of range [0, {size})")
        return cls(SlotAction(slot_idx), BlueprintAction(blueprint_idx), BlendAction(blend_idx), LifecycleOp(op_idx))

    def to_command(self, topology: str = "cnn") -> LifecycleCommand:
        if self.op == LifecycleOp.WAIT:
            return LifecycleCommand(LifecycleOp.WAIT)
        if self.op == LifecycleOp.GERMINATE:
            if self.blueprint == BlueprintAction.NOOP:
                raise ValueError("GERMINATE with the noop blueprint is not an action")
            return LifecycleCommand(
                self.op, self.slot_id, self.blueprint_id(topology), self.blend_algorithm_id
            )
        return LifecycleCommand(self.op, self.slot_id)

    @classmethod
    def from_command(cls, cmd: LifecycleCommand, topology: str = "cnn") -> FactoredAction | None:
        """Factored form of a command; None when its blueprint is outside the policy head."""
        if cmd.op == LifecycleOp.WAIT:
            return cls(SlotAction.EARLY, BlueprintAction.NOOP, BlendAction.LINEAR, LifecycleOp.WAIT)
        assert cmd.slot_id is not None
        slot = SlotAction.from_slot_id(cmd.slot_id)
        if cmd.op != LifecycleOp.GERMINATE:
            return cls(slot, BlueprintAction.NOOP, BlendAction.LINEAR, cmd.op)
        assert cmd.blueprint_id is not None and cmd.blend_id is not None
        blueprint = BlueprintAction.from_blueprint_id(cmd.blueprint_id, topology)
        if blueprint is None or blueprint == BlueprintAction.NOOP:
            return None
        return cls(slot, blueprint, BlendAction.from_algorithm_id(cmd.blend_id), cmd.op)


_GERMINATE_BASE = 1
_CULL_BASE = 1 + NUM_SLOTS * (NUM_BLUEPRINTS - 1) * NUM_BLENDS  # 37
_FOSSILIZE_BASE = _CULL_BASE + NUM_SLOTS  # 40
assert _FOSSILIZE_BASE + NUM_SLOTS == NUM_JOINT_ACTIONS


def joint_index(action: FactoredAction) -> int:
    """Index of a factored action among the 43 joint actions (IQL, datasets)."""
    if action.op == LifecycleOp.WAIT:
        return 0
    s = int(action.slot)
    if action.op == LifecycleOp.GERMINATE:
        if action.blueprint == BlueprintAction.NOOP:
            raise ValueError("GERMINATE with the noop blueprint has no joint index")
        return _GERMINATE_BASE + 12 * s + 3 * (int(action.blueprint) - 1) + int(action.blend)
    if action.op == LifecycleOp.CULL:
        return _CULL_BASE + s
    return _FOSSILIZE_BASE + s


def from_joint_index(index: int) -> FactoredAction:
    """Inverse of `joint_index`; placeholders (index 0) fill the heads an op does not use."""
    if not 0 <= index < NUM_JOINT_ACTIONS:
        raise ValueError(f"joint index {index} out of range [0, {NUM_JOINT_ACTIONS})")
    if index == 0:
        return FactoredAction.from_indices(0, 0, 0, LifecycleOp.WAIT)
    if index < _CULL_BASE:
        s, rest = divmod(index - _GERMINATE_BASE, 12)
        b, blend = divmod(rest, 3)
        return FactoredAction.from_indices(s, b + 1, blend, LifecycleOp.GERMINATE)
    if index < _FOSSILIZE_BASE:
        return FactoredAction.from_indices(index - _CULL_BASE, 0, 0, LifecycleOp.CULL)
    return FactoredAction.from_indices(index - _FOSSILIZE_BASE, 0, 0, LifecycleOp.FOSSILIZE)


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
    """Joint validity of every head combination; slots are indexed in canonical order."""

    op_slot: tuple[tuple[bool, ...], ...]  # [NUM_OPS][NUM_SLOTS]
    op: tuple[bool, ...]  # [NUM_OPS]
    slot_blueprint: tuple[tuple[bool, ...], ...]  # [NUM_SLOTS][NUM_BLUEPRINTS]
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

    def is_valid_command(self, cmd: LifecycleCommand, topology: str) -> bool:
        """Validity of a command; germinating a blueprint outside the head needs only a valid slot."""
        if cmd.op == LifecycleOp.WAIT:
            return True
        assert cmd.slot_id is not None
        if cmd.slot_id not in CANONICAL_SLOTS or not self.op_slot[cmd.op][CANONICAL_SLOTS.index(cmd.slot_id)]:
            return False
        if cmd.op == LifecycleOp.GERMINATE and cmd.blueprint_id == BLUEPRINT_HEAD[topology][0]:
            return False  # the noop blueprint is never a germination
        action = FactoredAction.from_command(cmd, topology)
        return action is None or self.is_valid(action)

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
        return ActionValidity(op_slot=op_slot, op=op, slot_blueprint=slot_blueprint, blend=self.blend)

    def valid_slots(self, op: LifecycleOp) -> tuple[str, ...]:
        return tuple(s for i, s in enumerate(CANONICAL_SLOTS) if self.op_slot[op][i])

    def joint_mask(self) -> tuple[bool, ...]:
        """Validity of each of the 43 joint actions."""
        return tuple(self.is_valid(from_joint_index(i)) for i in range(NUM_JOINT_ACTIONS))


def compute_action_validity(
    slot_states: Mapping[str, MaskSeedInfo | None],
    *,
    total_seeds: int = 0,
    max_seeds: int = 0,
    topology: str = "cnn",
    embargoed: Iterable[str] = (),
) -> ActionValidity:
    """Apply the validity rules. Keys of `slot_states` are the enabled slots (None = empty)."""
    _check_topology(topology)
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
    slot_blueprint = tuple(tuple(b != 0 for b in range(NUM_BLUEPRINTS)) for _ in range(NUM_SLOTS))
    return ActionValidity(op_slot=op_slot, op=op, slot_blueprint=slot_blueprint, blend=(True,) * NUM_BLENDS)
