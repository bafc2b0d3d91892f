"""Telemetry contracts: levels, event types, the event record, the sink protocol and SeedTelemetry."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum, IntEnum, auto
from typing import Any, Literal, Protocol, runtime_checkable


class TelemetryLevel(IntEnum):
    OFF = 0
    MINIMAL = 1
    NORMAL = 2
    DEBUG = 3


class TelemetryEventType(Enum):
    TRAINING_STARTED = auto()
    EPOCH_COMPLETED = auto()
    EPISODE_COMPLETED = auto()
    BATCH_COMPLETED = auto()
    SEED_GERMINATED = auto()
    SEED_STAGE_CHANGED = auto()
    SEED_GATE_EVALUATED = auto()
    SEED_FOSSILIZED = auto()
    SEED_CULLED = auto()
    HOST_STABILIZED = auto()
    COUNTERFACTUAL_COMPUTED = auto()
    ACTION_TAKEN = auto()
    REWARD_COMPUTED = auto()
    PPO_UPDATE_COMPLETED = auto()
    IQL_EPOCH_COMPLETED = auto()
    RATIO_EXPLOSION_DETECTED = auto()
    RATIO_COLLAPSE_DETECTED = auto()
    VALUE_COLLAPSE_DETECTED = auto()
    NUMERICAL_INSTABILITY_DETECTED = auto()
    TELEMETRY_ESCALATED = auto()
    GRADIENT_STATS = auto()
    GOVERNOR_PANIC = auto()
    GOVERNOR_ROLLBACK = auto()
    GOVERNOR_SNAPSHOT = auto()
    PLATEAU_DETECTED = auto()
    IMPROVEMENT_DETECTED = auto()
    DEGRADATION_DETECTED = auto()
    CHECKPOINT_SAVED = auto()
    CHECKPOINT_LOADED = auto()
    COMPARISON_EPISODE_COMPLETED = auto()
    RUN_COMPLETED = auto()


_E = TelemetryEventType
_MIN, _NORMAL, _DEBUG = TelemetryLevel.MINIMAL, TelemetryLevel.NORMAL, TelemetryLevel.DEBUG

EVENT_MIN_LEVEL: dict[TelemetryEventType, TelemetryLevel] = {
    _E.TRAINING_STARTED: _MIN,
    _E.EPOCH_COMPLETED: _NORMAL,
    _E.EPISODE_COMPLETED: _MIN,
    _E.BATCH_COMPLETED: _MIN,
    _E.SEED_GERMINATED: _NORMAL,
    _E.SEED_STAGE_CHANGED: _NORMAL,
    _E.SEED_GATE_EVALUATED: _DEBUG,
    _E.SEED_FOSSILIZED: _NORMAL,
    _E.SEED_CULLED: _NORMAL,
    _E.HOST_STABILIZED: _NORMAL,
    _E.COUNTERFACTUAL_COMPUTED: _NORMAL,
    _E.ACTION_TAKEN: _NORMAL,
    _E.REWARD_COMPUTED: _DEBUG,
    _E.PPO_UPDATE_COMPLETED: _MIN,
    _E.IQL_EPOCH_COMPLETED: _MIN,
    _E.RATIO_EXPLOSION_DETECTED: _MIN,
    _E.RATIO_COLLAPSE_DETECTED: _MIN,
    _E.VALUE_COLLAPSE_DETECTED: _MIN,
    _E.NUMERICAL_INSTABILITY_DETECTED: _MIN,
    _E.TELEMETRY_ESCALATED: _MIN,
    _E.GRADIENT_STATS: _DEBUG,
    _E.GOVERNOR_PANIC: _MIN,
    _E.GOVERNOR_ROLLBACK: _MIN,
    _E.GOVERNOR_SNAPSHOT: _DEBUG,
    _E.PLATEAU_DETECTED: _NORMAL,
    _E.IMPROVEMENT_DETECTED: _NORMAL,
    _E.DEGRADATION_DETECTED: _NORMAL,
    _E.CHECKPOINT_SAVED: _MIN,
    _E.CHECKPOINT_LOADED: _MIN,
    _E.COMPARISON_EPISODE_COMPLETED: _MIN,
    _E.RUN_COMPLETED: _MIN,
}

Severity = Literal["debug", "info", "warning", "error", "critical"]
SEVERITIES: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class TelemetryEvent:
    event_type: TelemetryEventType
    env_id: int | None = None
    seed_id: str | None = None
    slot_id: str | None = None
    epoch: int | None = None
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    severity: Severity = "info"
    event_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    timestamp: datetime = field(default_factory=_utc_now)


@runtime_checkable
class TelemetrySink(Protocol):
    """Where components send events. Passed explicitly; there is no process-wide hub."""

    def emit(self, event: TelemetryEvent) -> None: ...

    def wants(self, event_type: TelemetryEventType) -> bool: ...

    def escalate(self, epochs: int) -> None: ...

    def tick(self) -> None: ...


def _clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


@dataclass(slots=True)
class SeedTelemetry:
    """A seed's local picture, fed to policies as 10 features in [-1, 1]."""

    seed_id: str
    blueprint_id: str = ""
    layer_id: str = ""
    gradient_norm: float = 0.0
    gradient_health: float = 1.0
    has_vanishing: bool = False
    has_exploding: bool = False
    accuracy: float = 0.0
    accuracy_delta: float = 0.0
    epochs_in_stage: int = 0
    stage: int = 1
    alpha: float = 0.0
    epoch: int = 0
    max_epochs: int = 25
    captured_at: datetime = field(default_factory=_utc_now)

    @classmethod
    def feature_dim(cls) -> int:
        return 10

    def to_features(self) -> list[float]:
        return [
            _clamp(self.gradient_norm, 0.0, 10.0) / 10.0,
            _clamp(self.gradient_health, 0.0, 1.0),
            1.0 if self.has_vanishing else 0.0,
            1.0 if self.has_exploding else 0.0,
            min(self.epochs_in_stage, 50) / 50.0,
            _clamp(self.accuracy / 100.0, 0.0, 1.0),
            _clamp(self.accuracy_delta / 10.0, -1.0, 1.0),
            _clamp((self.stage - 1) / 6.0, 0.0, 1.0),
            _clamp(self.alpha, 0.0, 1.0),
            _clamp(self.epoch / max(self.max_epochs, 1), 0.0, 1.0),
        ]


def emit_if_wanted(sink: TelemetrySink | None, event_type: TelemetryEventType, message: str, data: dict[str, Any], *,
                   severity: Severity = "info", env_id: int | None = None, slot_id: str | None = None,
                   epoch: int | None = None) -> None:
    """Build and send an event only when there is a sink and it wants the type: building one costs an id and a
    timestamp, which most events at the default telemetry level never need."""
    if sink is not None and sink.wants(event_type):
        sink.emit(TelemetryEvent(event_type, env_id=env_id, slot_id=slot_id, epoch=epoch, message=message, data=data,
                                 severity=severity))
