"""Leyline: esper's shared contracts (enums, dataclasses, constants, pure validity rules, the strict config base).
Standard library only, and pydantic for the configs."""

from esper.leyline.actions import (
    BLEND_IDS,
    NOOP_BLUEPRINT,
    UNRECORDED_HEADS,
    ActionSpace,
    ActionValidity,
    BlendAction,
    FactoredAction,
    LifecycleCommand,
    LifecycleOp,
    MaskSeedInfo,
    SlotAction,
    compute_action_validity,
    ordered_slots,
)
from esper.leyline.constants import (
    CANONICAL_SLOTS,
    NUM_BLENDS,
    NUM_OPS,
    NUM_SLOTS,
    OBS_SCHEMA,
)
from esper.leyline.errors import UserInputError, did_you_mean
from esper.leyline.reports import SeedMetrics, SeedStateReport
from esper.leyline.signals import EnvObservation, TrainingMetrics, TrainingSignals
from esper.leyline.stages import (
    VALID_TRANSITIONS,
    GateLevel,
    GateResult,
    SeedStage,
    is_active_stage,
    is_live_stage,
    is_valid_transition,
)
from esper.leyline.telemetry import (
    EVENT_MIN_LEVEL,
    SeedTelemetry,
    TelemetryEvent,
    TelemetryEventType,
    TelemetryLevel,
    TelemetrySink,
    emit_if_wanted,
)

__all__ = [
    "BLEND_IDS",
    "CANONICAL_SLOTS",
    "EVENT_MIN_LEVEL",
    "NOOP_BLUEPRINT",
    "NUM_BLENDS",
    "NUM_OPS",
    "NUM_SLOTS",
    "OBS_SCHEMA",
    "UNRECORDED_HEADS",
    "VALID_TRANSITIONS",
    "ActionSpace",
    "ActionValidity",
    "BlendAction",
    "EnvObservation",
    "FactoredAction",
    "GateLevel",
    "GateResult",
    "LifecycleCommand",
    "LifecycleOp",
    "MaskSeedInfo",
    "SeedMetrics",
    "SeedStage",
    "SeedStateReport",
    "SeedTelemetry",
    "SlotAction",
    "TelemetryEvent",
    "TelemetryEventType",
    "TelemetryLevel",
    "TelemetrySink",
    "TrainingMetrics",
    "TrainingSignals",
    "UserInputError",
    "compute_action_validity",
    "did_you_mean",
    "emit_if_wanted",
    "is_active_stage",
    "is_live_stage",
    "is_valid_transition",
    "ordered_slots",
]
