"""Telemetry contracts: levels, event min-levels, TelemetryEvent, SeedTelemetry features."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from enum import IntEnum

import pytest

from esper.leyline import (
    EVENT_MIN_LEVEL,
    SeedStage,
    SeedTelemetry,
    TelemetryEvent,
    TelemetryEventType,
    TelemetryLevel,
    TelemetrySink,
)
from esper.leyline.constants import SEED_TELEMETRY_DIM

L = TelemetryLevel

# The telemetry event table: name → minimum level.
SPEC_MIN_LEVEL: dict[str, TelemetryLevel] = {
    "TRAINING_STARTED": L.MINIMAL,
    "EPOCH_COMPLETED": L.NORMAL,
    "EPISODE_COMPLETED": L.MINIMAL,
    "BATCH_COMPLETED": L.MINIMAL,
    "SEED_GERMINATED": L.NORMAL,
    "SEED_STAGE_CHANGED": L.NORMAL,
    "SEED_GATE_EVALUATED": L.DEBUG,
    "SEED_FOSSILIZED": L.NORMAL,
    "SEED_CULLED": L.NORMAL,
    "HOST_STABILIZED": L.NORMAL,
    "COUNTERFACTUAL_COMPUTED": L.NORMAL,
    "ACTION_TAKEN": L.NORMAL,
    "REWARD_COMPUTED": L.DEBUG,
    "PPO_UPDATE_COMPLETED": L.MINIMAL,
    "RATIO_EXPLOSION_DETECTED": L.MINIMAL,
    "RATIO_COLLAPSE_DETECTED": L.MINIMAL,
    "VALUE_COLLAPSE_DETECTED": L.MINIMAL,
    "NUMERICAL_INSTABILITY_DETECTED": L.MINIMAL,
    "TELEMETRY_ESCALATED": L.MINIMAL,
    "GRADIENT_STATS": L.DEBUG,
    "GOVERNOR_PANIC": L.MINIMAL,
    "GOVERNOR_ROLLBACK": L.MINIMAL,
    "GOVERNOR_SNAPSHOT": L.DEBUG,
    "PLATEAU_DETECTED": L.NORMAL,
    "IMPROVEMENT_DETECTED": L.NORMAL,
    "DEGRADATION_DETECTED": L.NORMAL,
    "CHECKPOINT_SAVED": L.MINIMAL,
    "CHECKPOINT_LOADED": L.MINIMAL,
    "DATAGEN_EPISODE_COMPLETED": L.MINIMAL,
    "DATAGEN_EPISODE_FAILED": L.MINIMAL,
    "IQL_EPOCH_COMPLETED": L.MINIMAL,
    "COMPARISON_EPISODE_COMPLETED": L.MINIMAL,
    "RUN_COMPLETED": L.MINIMAL,
}
# Event types whose emitters (datagen, IQL) are not built yet; they join the enum together with their emitters.
MISSING_IN_ENUM = {"DATAGEN_EPISODE_COMPLETED", "DATAGEN_EPISODE_FAILED", "IQL_EPOCH_COMPLETED"}


def test_telemetry_level_values() -> None:
    assert issubclass(TelemetryLevel, IntEnum)
    assert {m.name: m.value for m in TelemetryLevel} == {"OFF": 0, "MINIMAL": 1, "NORMAL": 2, "DEBUG": 3}


def test_event_min_level_complete_for_every_event_type() -> None:
    """Every TelemetryEventType member has a level above OFF; no extra keys."""
    assert set(EVENT_MIN_LEVEL) == set(TelemetryEventType)
    for event_type, level in EVENT_MIN_LEVEL.items():
        assert isinstance(level, TelemetryLevel), event_type
        assert level >= L.MINIMAL, event_type


def test_event_min_levels_match_spec_for_existing_members() -> None:
    for member in TelemetryEventType:
        assert member.name in SPEC_MIN_LEVEL, f"{member.name} is not in the event table"
        assert EVENT_MIN_LEVEL[member] == SPEC_MIN_LEVEL[member.name], member.name


def test_other_spec_event_types_exist() -> None:
    for name in sorted(set(SPEC_MIN_LEVEL) - MISSING_IN_ENUM):
        assert name in TelemetryEventType.__members__, name


def test_telemetry_event_defaults() -> None:
    before = datetime.now(UTC)
    event = TelemetryEvent(event_type=TelemetryEventType.SEED_CULLED)
    after = datetime.now(UTC)
    assert uuid.UUID(event.event_id).version == 4
    assert event.timestamp.tzinfo is not None and event.timestamp.utcoffset() == timedelta(0)
    assert before <= event.timestamp <= after
    assert (event.env_id, event.seed_id, event.slot_id, event.epoch) == (None, None, None, None)
    assert event.message == "" and event.data == {} and event.severity == "info"


def test_telemetry_event_ids_unique_and_data_not_shared() -> None:
    a = TelemetryEvent(event_type=TelemetryEventType.ACTION_TAKEN)
    b = TelemetryEvent(event_type=TelemetryEventType.ACTION_TAKEN)
    assert a.event_id != b.event_id
    a.data["x"] = 1
    assert b.data == {}


def test_telemetry_event_fields() -> None:
    names = {f.name for f in dataclasses.fields(TelemetryEvent)}
    assert names == {
        "event_id",
        "event_type",
        "timestamp",
        "env_id",
        "seed_id",
        "slot_id",
        "epoch",
        "message",
        "data",
        "severity",
    }


def test_telemetry_sink_protocol_structural() -> None:
    class Sink:
        def emit(self, event: TelemetryEvent) -> None: ...

        def wants(self, event_type: TelemetryEventType) -> bool:
            return True

        def escalate(self, epochs: int) -> None: ...

        def tick(self) -> None: ...

    class NotASink:
        def emit(self, event: TelemetryEvent) -> None: ...

    assert isinstance(Sink(), TelemetrySink)
    assert not isinstance(NotASink(), TelemetrySink)


# ------------------------------------------------------------------------------------------------- SeedTelemetry


def test_seed_telemetry_requires_seed_id() -> None:
    assert SeedTelemetry(seed_id="test_seed_1").seed_id == "test_seed_1"
    with pytest.raises(TypeError):
        SeedTelemetry()  # type: ignore[call-arg]


def test_seed_telemetry_defaults() -> None:
    t = SeedTelemetry(seed_id="test")
    assert t.blueprint_id == "" and t.layer_id == ""
    assert t.gradient_norm == 0.0
    assert t.gradient_health == 1.0
    assert t.has_vanishing is False and t.has_exploding is False
    assert t.accuracy == 0.0 and t.accuracy_delta == 0.0
    assert t.epochs_in_stage == 0
    assert t.stage == 1
    assert t.alpha == 0.0
    assert t.epoch == 0 and t.max_epochs == 25


def test_seed_telemetry_is_slotted_and_mutable() -> None:
    t = SeedTelemetry(seed_id="s")
    assert not hasattr(t, "__dict__")
    t.alpha = 0.5
    assert t.alpha == 0.5


def test_seed_telemetry_feature_dim() -> None:
    t = SeedTelemetry(seed_id="test")
    features = t.to_features()
    assert len(features) == 10 == SeedTelemetry.feature_dim() == SEED_TELEMETRY_DIM
    assert all(isinstance(f, float) for f in features)


def test_default_features() -> None:
    assert SeedTelemetry(seed_id="s").to_features() == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_seed001_normalized_range() -> None:
    t = SeedTelemetry(
        seed_id="test",
        gradient_norm=5.0,
        gradient_health=0.8,
        has_vanishing=True,
        has_exploding=False,
        accuracy=75.0,
        accuracy_delta=2.5,
        epochs_in_stage=10,
        stage=4,
        alpha=0.5,
        epoch=12,
        max_epochs=25,
    )
    features = t.to_features()
    for i, f in enumerate(features):
        assert -1.0 <= f <= 1.0, f"Feature {i} out of range: {f}"
    assert features == pytest.approx([0.5, 0.8, 1.0, 0.0, 0.2, 0.75, 0.25, 0.5, 0.5, 0.48])


def test_seed001_spot_values() -> None:
    assert SeedTelemetry(seed_id="t", stage=1).to_features()[7] == 0.0
    assert SeedTelemetry(seed_id="t", stage=7).to_features()[7] == 1.0
    assert SeedTelemetry(seed_id="t", epoch=10, max_epochs=20).to_features()[9] == 0.5
    assert SeedTelemetry(seed_id="t", gradient_norm=5.0).to_features()[0] == 0.5
    assert SeedTelemetry(seed_id="t", accuracy=75.0).to_features()[5] == 0.75


@pytest.mark.parametrize(
    ("stage", "value"),
    [
        (SeedStage.DORMANT, 0.0),
        (SeedStage.GERMINATED, 1 / 6),
        (SeedStage.TRAINING, 1 / 3),
        (SeedStage.BLENDING, 0.5),
        (SeedStage.PROBATIONARY, 5 / 6),
        (SeedStage.FOSSILIZED, 1.0),
        (SeedStage.UNKNOWN, 0.0),
        (SeedStage.CULLED, 1.0),
    ],
)
def test_stage_feature(stage: SeedStage, value: float) -> None:
    assert SeedTelemetry(seed_id="t", stage=int(stage)).to_features()[7] == pytest.approx(value)


@pytest.mark.parametrize(
    ("kwargs", "index", "value"),
    [
        ({"gradient_norm": 25.0}, 0, 1.0),
        ({"gradient_norm": -3.0}, 0, 0.0),
        ({"gradient_health": 1.7}, 1, 1.0),
        ({"gradient_health": -0.2}, 1, 0.0),
        ({"has_exploding": True}, 3, 1.0),
        ({"epochs_in_stage": 25}, 4, 0.5),
        ({"epochs_in_stage": 500}, 4, 1.0),
        ({"accuracy": 140.0}, 5, 1.0),
        ({"accuracy": -5.0}, 5, 0.0),
        ({"accuracy_delta": -4.0}, 6, -0.4),
        ({"accuracy_delta": 30.0}, 6, 1.0),
        ({"accuracy_delta": -30.0}, 6, -1.0),
        ({"alpha": 1.5}, 8, 1.0),
        ({"alpha": -0.5}, 8, 0.0),
        ({"epoch": 40, "max_epochs": 25}, 9, 1.0),
        ({"epoch": 3, "max_epochs": 0}, 9, 1.0),
        ({"epoch": 0, "max_epochs": 0}, 9, 0.0),
    ],
)
def test_feature_formulas_and_clamps(kwargs: dict[str, object], index: int, value: float) -> None:
    features = SeedTelemetry(seed_id="t", **kwargs).to_features()  # type: ignore[arg-type]
    assert features[index] == pytest.approx(value)


def test_captured_at_is_aware_utc_now() -> None:
    before = datetime.now(UTC)
    t = SeedTelemetry(seed_id="test")
    after = datetime.now(UTC)
    assert t.captured_at.tzinfo is not None and t.captured_at.utcoffset() == timedelta(0)
    assert before <= t.captured_at <= after
