"""Reward terms every family shares: the logged potentials and shaping, the governor penalty, rent, clamping."""

from __future__ import annotations

import math

from esper.env.potential import lifecycle_potential, pbrs_shaping
from esper.env.step_record import ShapedRewardComponents, StepRecord
from esper.leyline.constants import DEFAULT_GOVERNOR_DEATH_PENALTY

__all__ = ["base_components", "clamp", "rent"]


def clamp(x: float, lo: float, hi: float) -> float:
    """Clamp, mapping NaN to `lo`: a NaN measurement must never earn the best value (Python's min/max would)."""
    return lo if math.isnan(x) else max(lo, min(hi, x))


def rent(weight: float, growth: float, cap: float) -> float:
    """A charge for added parameters, logarithmic in the growth ratio and capped."""
    return -min(weight * math.log1p(growth), cap)


def base_components(record: StepRecord, family: str, gamma: float, pbrs_weight: float) -> ShapedRewardComponents:
    """Components every family logs: potentials, shaping (weight 0 disables it), governor penalty, diagnostics."""
    before, after = record.before, record.after
    return ShapedRewardComponents(
        family=family,
        pbrs=pbrs_shaping(before.snapshot, after.snapshot, gamma, pbrs_weight, terminal=record.is_terminal),
        governor_penalty=-DEFAULT_GOVERNOR_DEATH_PENALTY if record.rollback else 0.0,
        growth_ratio=after.param_ratio,
        phi_prev=lifecycle_potential(before.snapshot),
        phi_next=0.0 if record.is_terminal else lifecycle_potential(after.snapshot),
        val_accuracy=after.val_accuracy,
        action_name=record.command.op.name,
        action_success=record.action_success,
    )
