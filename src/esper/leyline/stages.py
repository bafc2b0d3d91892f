"""Seed lifecycle stages, the transition table and quality-gate result types."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class SeedStage(IntEnum):
    """Lifecycle stage of a seed. Value 5 is intentionally unused."""

    UNKNOWN = 0
    DORMANT = 1
    GERMINATED = 2
    TRAINING = 3
    BLENDING = 4
    PROBATIONARY = 6
    FOSSILIZED = 7
    CULLED = 8


VALID_TRANSITIONS: dict[SeedStage, tuple[SeedStage, ...]] = {
    SeedStage.UNKNOWN: (SeedStage.DORMANT,),
    SeedStage.DORMANT: (SeedStage.GERMINATED,),
    SeedStage.GERMINATED: (SeedStage.TRAINING, SeedStage.CULLED),
    SeedStage.TRAINING: (SeedStage.BLENDING, SeedStage.CULLED),
    SeedStage.BLENDING: (SeedStage.PROBATIONARY, SeedStage.CULLED),
    SeedStage.PROBATIONARY: (SeedStage.FOSSILIZED, SeedStage.CULLED),
    SeedStage.FOSSILIZED: (),
    SeedStage.CULLED: (),  # culling empties the slot in the same call: the next seed there is a new one
}

_ACTIVE = frozenset({SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY, SeedStage.FOSSILIZED})
_LIVE = frozenset({SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY})


def is_valid_transition(from_stage: SeedStage, to_stage: SeedStage) -> bool:
    return to_stage in VALID_TRANSITIONS.get(SeedStage(from_stage), ())


def is_active_stage(stage: SeedStage) -> bool:
    """Stages whose seed participates in the forward pass."""
    return stage in _ACTIVE


def is_live_stage(stage: SeedStage) -> bool:
    """Present and not yet decided (fossilize or cull still possible)."""
    return stage in _LIVE


class GateLevel(IntEnum):
    G0 = 0
    G1 = 1
    G2 = 2
    G3 = 3
    G5 = 5


@dataclass(frozen=True, slots=True)
class GateResult:
    gate: GateLevel
    passed: bool
    score: float = 0.0
    checks_passed: tuple[str, ...] = ()
    checks_failed: tuple[str, ...] = ()
    message: str = ""
