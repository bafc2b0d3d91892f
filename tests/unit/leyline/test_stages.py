"""Seed stages: enum values, the exact transition table, predicates, gate types."""

from __future__ import annotations

import dataclasses
from enum import IntEnum

import pytest

from esper.leyline import (
    VALID_TRANSITIONS,
    GateLevel,
    GateResult,
    SeedStage,
    is_active_stage,
    is_live_stage,
    is_valid_transition,
)

S = SeedStage

EXPECTED_VALUES = {
    "UNKNOWN": 0,
    "DORMANT": 1,
    "GERMINATED": 2,
    "TRAINING": 3,
    "BLENDING": 4,
    "PROBATIONARY": 6,
    "FOSSILIZED": 7,
    "CULLED": 8,
}

EXPECTED_TRANSITIONS: dict[SeedStage, tuple[SeedStage, ...]] = {
    S.UNKNOWN: (S.DORMANT,),
    S.DORMANT: (S.GERMINATED,),
    S.GERMINATED: (S.TRAINING, S.CULLED),
    S.TRAINING: (S.BLENDING, S.CULLED),
    S.BLENDING: (S.PROBATIONARY, S.CULLED),
    S.PROBATIONARY: (S.FOSSILIZED, S.CULLED),
    S.FOSSILIZED: (),
    S.CULLED: (),
}

ACTIVE = {S.TRAINING, S.BLENDING, S.PROBATIONARY, S.FOSSILIZED}
LIVE = {S.GERMINATED, S.TRAINING, S.BLENDING, S.PROBATIONARY}


def test_seed_stage_is_int_enum_with_exact_values() -> None:
    """Exact member names/values, in declaration order; value 5 is unused."""
    assert issubclass(SeedStage, IntEnum)
    assert {m.name: m.value for m in SeedStage} == EXPECTED_VALUES
    assert [m.name for m in SeedStage] == list(EXPECTED_VALUES)
    with pytest.raises(ValueError):
        SeedStage(5)


def test_transition_table_exact_rows_and_order() -> None:
    """Every stage has a row; rows are tuples equal to the spec (order significant)."""
    assert set(VALID_TRANSITIONS) == set(SeedStage)
    for stage, targets in EXPECTED_TRANSITIONS.items():
        assert isinstance(VALID_TRANSITIONS[stage], tuple), stage
        assert VALID_TRANSITIONS[stage] == targets, stage
        assert all(isinstance(t, SeedStage) for t in VALID_TRANSITIONS[stage])


@pytest.mark.parametrize("src", list(SeedStage), ids=lambda s: s.name)
@pytest.mark.parametrize("dst", list(SeedStage), ids=lambda s: s.name)
def test_is_valid_transition_matches_table(src: SeedStage, dst: SeedStage) -> None:
    assert is_valid_transition(src, dst) is (dst in EXPECTED_TRANSITIONS[src])


def test_is_valid_transition_accepts_plain_ints() -> None:
    assert is_valid_transition(2, 3)
    assert not is_valid_transition(3, 2)
    assert not is_valid_transition(S.FOSSILIZED, S.CULLED)


def test_fossilized_and_culled_are_terminal() -> None:
    assert VALID_TRANSITIONS[S.FOSSILIZED] == VALID_TRANSITIONS[S.CULLED] == ()
    assert not any(is_valid_transition(S.FOSSILIZED, t) for t in SeedStage)


@pytest.mark.parametrize("stage", list(SeedStage), ids=lambda s: s.name)
def test_predicates_for_every_stage(stage: SeedStage) -> None:
    assert is_active_stage(stage) is (stage in ACTIVE)
    assert is_live_stage(stage) is (stage in LIVE)


def test_predicate_partitions() -> None:
    """CULLED is neither live nor active; live ∪ {FOSSILIZED} = active ∪ {GERMINATED}."""
    live = {s for s in SeedStage if is_live_stage(s)}
    active = {s for s in SeedStage if is_active_stage(s)}
    assert S.CULLED not in live | active
    assert live | {S.FOSSILIZED} == active | {S.GERMINATED}


def test_gate_level_values() -> None:
    assert issubclass(GateLevel, IntEnum)
    assert {m.name: m.value for m in GateLevel} == {"G0": 0, "G1": 1, "G2": 2, "G3": 3, "G5": 5}


def test_gate_result_frozen_with_fields() -> None:
    result = GateResult(
        gate=GateLevel.G2, passed=True, score=0.4, checks_passed=("seed_ready",), checks_failed=(), message="ok"
    )
    assert [f.name for f in dataclasses.fields(GateResult)] == [
        "gate",
        "passed",
        "score",
        "checks_passed",
        "checks_failed",
        "message",
    ]
    assert result.gate is GateLevel.G2 and result.passed and result.score == 0.4
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.passed = False  # type: ignore[misc]
