"""Inputs and outputs of the reward functions: a `StepRecord` (one decision's transition) in, components out.

A decision is made after epoch e (from e = 1 to T − 1) and is credited with what it could influence: the
measurements of epoch e + 1. So a `StepRecord` pairs the `Measurement` the decision saw (`before`, epoch e) with
the one that followed it (`after`, epoch e + 1); the decision after epoch T − 1 is terminal. Rewards are pure
functions of the record, so a logged record reproduces its reward exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from esper.env.potential import LifecycleSnapshot
from esper.leyline.actions import LifecycleCommand, LifecycleOp, ordered_slots
from esper.leyline.stages import SeedStage

__all__ = ["SUMMED_FIELDS", "Measurement", "ShapedRewardComponents", "SlotRewardInfo", "StepRecord"]


def _require_finite(owner: str, **values: float) -> None:
    bad = {k: v for k, v in values.items() if not math.isfinite(v)}
    if bad:
        raise ValueError(f"{owner}: non-finite {bad}")


@dataclass(frozen=True, slots=True)
class SlotRewardInfo:
    """One occupied slot as measured. `total_improvement` and `counterfactual` are in pp."""

    stage: int
    epochs_in_stage: int
    seed_age_epochs: int
    total_improvement: float
    counterfactual: float | None
    acc_at_germination: float | None
    fossilize_ready: bool

    def __post_init__(self) -> None:
        SeedStage(self.stage)
        if self.epochs_in_stage < 0 or self.seed_age_epochs < 0:
            raise ValueError(f"Negative epoch counts: {self.epochs_in_stage}, {self.seed_age_epochs}")
        _require_finite("SlotRewardInfo", total_improvement=self.total_improvement)
        if self.counterfactual is not None:
            _require_finite("SlotRewardInfo", counterfactual=self.counterfactual)
        if self.acc_at_germination is not None:
            _require_finite("SlotRewardInfo", acc_at_germination=self.acc_at_germination)


@dataclass(frozen=True, slots=True)
class Measurement:
    """What one env's epoch measured, as rewards need it.

    `slots`: every enabled slot (None = empty) as it was during the epoch. `seed_param_counts`: one
    (seed_age_epochs, param_count) pair per seed present (module + gate; fossilized seeds included).
    `twin_val_accuracy`/`twin_val_loss`: the static twin's measurement of the same epoch (None without a twin).
    `train_flops`/`twin_train_flops`: the env's and its twin's training FLOPs from the episode's start to the end of
    this epoch, everything their `FlopMeter`s count (None for the twin without one, or with a stored twin, whose
    curves carry no FLOPs). `val_loss` and `loss_delta` may be non-finite after a divergence.
    """

    epoch: int
    val_accuracy: float
    val_loss: float
    acc_delta: float
    loss_delta: float
    slots: Mapping[str, SlotRewardInfo | None]
    snapshot: LifecycleSnapshot
    seed_param_counts: tuple[tuple[int, int], ...]
    host_param_count: int
    fossilized_contributing: int
    best_val_accuracy: float
    twin_val_accuracy: float | None = None
    twin_val_loss: float | None = None
    train_flops: int = 0
    twin_train_flops: int | None = None

    def __post_init__(self) -> None:
        enabled = set(ordered_slots(self.slots.keys()))
        if {slot for slot, _, _ in self.snapshot} != enabled or len(self.snapshot) != len(enabled):
            raise ValueError(f"snapshot must list each enabled slot {sorted(enabled)} once, got {self.snapshot}")
        if self.host_param_count <= 0:
            raise ValueError(f"host_param_count must be > 0, got {self.host_param_count}")
        if any(age < 0 or params < 0 for age, params in self.seed_param_counts):
            raise ValueError(f"Negative seed age or parameter count in {self.seed_param_counts}")
        if self.fossilized_contributing < 0:
            raise ValueError(f"fossilized_contributing must be >= 0, got {self.fossilized_contributing}")
        if self.train_flops < 0 or (self.twin_train_flops is not None and self.twin_train_flops < 0):
            raise ValueError(f"Negative training FLOPs: {self.train_flops}, twin {self.twin_train_flops}")
        _require_finite("Measurement", val_accuracy=self.val_accuracy, acc_delta=self.acc_delta,
                        best_val_accuracy=self.best_val_accuracy)

    @property
    def seed_param_count_total(self) -> int:
        return sum(params for _, params in self.seed_param_counts)

    @property
    def param_ratio(self) -> float:
        """Seed parameters per host parameter (live and fossilized seeds)."""
        return self.seed_param_count_total / self.host_param_count


@dataclass(frozen=True, slots=True)
class StepRecord:
    """The transition of the decision made after epoch `epoch`: what it saw, what it did, what followed.

    `rollback`: the governor rolled the model back while measuring `after`. `is_terminal`: this was the last
    decision (epoch = max_epochs − 1), so `after` is the final measurement of the episode.
    """

    epoch: int
    max_epochs: int
    command: LifecycleCommand
    action_success: bool
    before: Measurement
    after: Measurement
    rollback: bool

    def __post_init__(self) -> None:
        if not 1 <= self.epoch < self.max_epochs:
            raise ValueError(f"decision epoch {self.epoch} outside [1, {self.max_epochs - 1}]")
        if (self.before.epoch, self.after.epoch) != (self.epoch, self.epoch + 1):
            raise ValueError(f"decision {self.epoch} needs measurements of epochs {self.epoch} and {self.epoch + 1}, "
                             f"got {self.before.epoch} and {self.after.epoch}")
        if set(self.before.slots) != set(self.after.slots):
            raise ValueError("before and after must cover the same enabled slots")
        if self.command.op != LifecycleOp.WAIT:
            target = self.command.slot_id
            if target is None or target not in self.before.slots:
                raise ValueError(f"{self.command.describe()} targets a slot that is not enabled")
            occupied = self.before.slots[target] is not None
            if occupied == (self.command.op == LifecycleOp.GERMINATE):
                raise ValueError(f"{self.command.describe()}: target slot occupied={occupied} before the action")

    @property
    def is_terminal(self) -> bool:
        return self.epoch == self.max_epochs - 1

    def target_info(self) -> SlotRewardInfo | None:
        """Decision-time info of the command's target slot (None for WAIT and GERMINATE)."""
        return None if self.command.slot_id is None else self.before.slots[self.command.slot_id]


SUMMED_FIELDS: tuple[str, ...] = (
    "gap",
    "param_cost",
    "attribution",
    "proxy",
    "blending_warning",
    "probation_warning",
    "pbrs",
    "rent",
    "action_shaping",
    "terminal",
    "governor_penalty",
    "loss_primary",
    "sparse_terminal",
)


@dataclass(slots=True)
class ShapedRewardComponents:
    """One step's reward, decomposed. Only `SUMMED_FIELDS` enter `total()`; the rest are diagnostics for logs."""

    family: str
    gap: float = 0.0
    param_cost: float = 0.0
    attribution: float = 0.0
    proxy: float = 0.0
    blending_warning: float = 0.0
    probation_warning: float = 0.0
    pbrs: float = 0.0
    rent: float = 0.0
    action_shaping: float = 0.0
    terminal: float = 0.0
    governor_penalty: float = 0.0
    loss_primary: float = 0.0
    sparse_terminal: float = 0.0
    attribution_discount: float = 1.0
    ratio_penalty: float = 0.0
    growth_ratio: float = 0.0
    phi_prev: float = 0.0
    phi_next: float = 0.0
    val_accuracy: float = 0.0
    action_name: str = "WAIT"
    action_success: bool = True

    def total(self) -> float:
        total = 0.0
        for name in SUMMED_FIELDS:
            total += getattr(self, name)
        return total

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: every field plus "total"."""
        out = asdict(self)
        out["total"] = self.total()
        return out
