"""A decision waiting for its outcome.

A decision made after epoch e is credited with epoch e + 1's measurements, so it waits as a `PendingDecision` for
one epoch, held by the `Lockstep`, which then completes it into an `EnvStep` (its `StepRecord` and reward).
"""

from __future__ import annotations

from dataclasses import dataclass

from esper.env.logs import SlotSummary
from esper.env.step_record import Measurement
from esper.leyline import EnvObservation
from esper.tamiyo import TamiyoDecision
from esper.tolaria import TrainEpochStats, ValStats

__all__ = ["PendingDecision"]


@dataclass(frozen=True)
class PendingDecision:
    """A decision taken after epoch `observation.epoch`, with what it saw, until the next epoch is measured."""

    observation: EnvObservation
    decision: TamiyoDecision
    action_success: bool
    before: Measurement
    slots: dict[str, SlotSummary | None]
    train: TrainEpochStats
    val: ValStats
