"""Inputs and outputs of the reward functions: `StepRecord` in, `ShapedRewardComponents` out.

A `StepRecord` is built by the env runner after the action and `step_epoch`; rewards are pure functions
of it, so a logged record reproduces its reward exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from esper.env.potential import LifecycleSnapshot
from esper.leyline.actions import LifecycleCommand, LifecycleOp, ordered_slots
from esper.leyline.stages import SeedStage

__all__ = ["SUMMED_FIELDS", "ShapedRewardComponents", "SlotRewardInfo", "StepRecord"]


def _require_finite(owner: str, **values: float) -> None:
    bad = {k: v for k, v in values.items() if not math.isfinite(v)}
    if bad:
        raise ValueError(f"{owner}: non-finite {bad}")


@dataclass(frozen=True, slots=True)
class SlotRewardInfo:
    """Pre-action state of one occupied slot. `total_improvement` and `counterfactual` are in pp."""

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
class StepRecord:
    """Everything the rewards of epoch `epoch` (1-based) need.

    `slots`: pre-action info per enabled slot (None = empty). `seed_param_counts`: one (seed_age_epochs, param_count)
    pair per seed present after `step_epoch` (module + gate; fossilized seeds included), so the loss family can apply
    its rent grace period. `host_param_count` and `fossilized_contributing` (fossilized seeds whose total improvement
    at fossilization was ≥ 1.0 pp) are post-step too. `val_loss`/`loss_delta` may be non-finite on a rollback epoch.
    """

    epoch: int
    max_epochs: int
    slots: Mapping[str, SlotRewardInfo | None]
    command: LifecycleCommand
    action_success: bool
    val_acc: float
    val_loss: float
    acc_delta: float
    loss_delta: float
    seed_param_counts: tuple[tuple[int, int], ...]
    host_param_count: int
    fossilized_contributing: int
    prev_snapshot: LifecycleSnapshot
    next_snapshot: LifecycleSnapshot
    host_max_acc: float
    is_terminal: bool
    rollback: bool

    def __post_init__(self) -> None:
        if not 1 <= self.epoch <= self.max_epochs:
            raise ValueError(f"epoch {self.epoch} outside [1, {self.max_epochs}]")
        enabled = set(ordered_slots(self.slots.keys()))
        for name, snapshot in (("prev_snapshot", self.prev_snapshot), ("next_snapshot", self.next_snapshot)):
            if {slot for slot, _, _ in snapshot} != enabled or len(snapshot) != len(enabled):
                raise ValueError(f"{name} must list each enabled slot {sorted(enabled)} once, got {snapshot}")
        if self.command.op != LifecycleOp.WAIT:
            target = self.command.slot_id
            if target is None or target not in self.slots:
                raise ValueError(f"{self.command.describe()} targets a slot that is not enabled")
            occupied = self.slots[target] is not None
            if occupied == (self.command.op == LifecycleOp.GERMINATE):
                raise ValueError(f"{self.command.describe()}: target slot occupied={occupied} before the action")
        if self.host_param_count <= 0:
            raise ValueError(f"host_param_count must be > 0, got {self.host_param_count}")
        if any(age < 0 or params < 0 for age, params in self.seed_param_counts):
            raise ValueError(f"Negative seed age or parameter count in {self.seed_param_counts}")
        if self.fossilized_contributing < 0:
            raise ValueError(f"fossilized_contributing must be >= 0, got {self.fossilized_contributing}")
        _require_finite("StepRecord", val_acc=self.val_acc, acc_delta=self.acc_delta, host_max_acc=self.host_max_acc)

    @property
    def seed_param_count_total(self) -> int:
        return sum(params for _, params in self.seed_param_counts)

    def target_info(self) -> SlotRewardInfo | None:
        """Pre-action info of the command's target slot (None for WAIT and GERMINATE)."""
        return None if self.command.slot_id is None else self.slots[self.command.slot_id]


SUMMED_FIELDS: tuple[str, ...] = (
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
    val_acc: float = 0.0
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
