"""The contribution reward family: pays for measured causal contribution, shaped over the seed lifecycle.

Attribution pays each seed's counterfactual contribution, discounted when the host got worse since germination (a
"ransomware" seed makes itself indispensable without helping) and bounded by real progress; action shaping judges
fossilize and cull decisions by the target seed's state when they were made; potential-based shaping over the
lifecycle of all slots guides exploration without changing the optimal policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

from esper.env.shared_terms import base_components, rent
from esper.env.step_record import ShapedRewardComponents, SlotRewardInfo, StepRecord
from esper.leyline.actions import LifecycleOp
from esper.leyline.constants import (
    DEFAULT_CONTRIBUTION_WEIGHT,
    DEFAULT_FOSSILIZE_TERMINAL_SCALE,
    DEFAULT_MIN_FOSSILIZE_CONTRIBUTION,
    DEFAULT_PBRS_WEIGHT,
    DEFAULT_RENT_WEIGHT,
    MIN_PROBATION_EPOCHS,
)
from esper.leyline.stages import SeedStage, is_live_stage
from esper.leyline.strict_config import StrictConfig, Weight

__all__ = ["ContributionRewardConfig", "compute_contribution_reward"]


def _neg_sigmoid(x: float) -> float:
    """sigmoid(x) for x < 0 without overflow."""
    e = math.exp(x)
    return e / (1.0 + e)


# Fixed shape constants of the contribution family (deliberately not config fields).
ATTRIBUTION_SIGMOID_SLOPE = 10.0
BLENDING_WARNING_BASE, BLENDING_WARNING_PER_EPOCH, BLENDING_WARNING_MAX = 0.1, 0.05, 0.3
PROBATION_WARNING_BASE, PROBATION_WARNING_GROWTH, PROBATION_WARNING_MAX, PROBATION_GRACE_EPOCHS = 0.1, 3.0, 1.0, 2
FOSSILIZE_REGRESSED_PENALTY, FOSSILIZE_REGRESSION_SCALE, FOSSILIZE_REGRESSION_MAX = 0.5, 0.2, 1.0
FOSSILIZE_RANSOMWARE_PENALTY, RANSOMWARE_MIN_CONTRIBUTION, RANSOMWARE_MAX_IMPROVEMENT = 0.3, 0.1, -0.2
CULL_GOOD_SEED_SCALE = 0.05


class ContributionRewardConfig(StrictConfig):
    """Weights of the contribution family: per-seed attributed accuracy, potential shaping, rent and per-action
    terms."""

    KIND: ClassVar[str] = "contribution reward config"
    contribution_weight: Weight = DEFAULT_CONTRIBUTION_WEIGHT
    proxy_contribution_weight: Weight = 0.0  # >0 pays the host's own progress while a seed is unmeasured
    pbrs_weight: Weight = DEFAULT_PBRS_WEIGHT
    rent_weight: Weight = DEFAULT_RENT_WEIGHT
    max_rent: Weight = 8.0
    germinate_cost: Weight = -0.02
    fossilize_cost: Weight = -0.01
    cull_cost: Weight = -0.005
    fossilize_base_bonus: Weight = 0.5
    fossilize_contribution_scale: Weight = 0.1
    fossilize_noncontributing_penalty: Weight = -0.2
    cull_hurting_bonus: Weight = 0.3
    cull_acceptable_bonus: Weight = 0.1
    cull_good_seed_penalty: Weight = -0.3
    cull_hurting_threshold: Weight = -0.5
    terminal_acc_weight: Weight = 0.05
    fossilize_terminal_scale: Weight = DEFAULT_FOSSILIZE_TERMINAL_SCALE


def _slot_attribution(info: SlotRewardInfo, c: float, val_accuracy: float, weight: float) -> tuple[float, float, float]:
    """(term, discount, ratio_penalty) of one slot before action overrides."""
    ti = info.total_improvement
    discount = 1.0 if ti >= 0 else _neg_sigmoid(ATTRIBUTION_SIGMOID_SLOPE * ti)
    ratio_penalty = 0.0
    if c > 1.0 and discount >= 0.5:
        if ti > 0.1:
            if c / ti > 5.0:
                ratio_penalty = -min(0.3, 0.1 * (c / ti - 5.0) / 5.0)
        else:
            ratio_penalty = -0.3 * min(1.0, c / 10.0)
    if c < 0:
        return weight * c + ratio_penalty, discount, ratio_penalty
    progress = 0.0 if info.acc_at_germination is None else val_accuracy - info.acc_at_germination
    if progress <= 0:
        bounded = 0.0
    elif c >= progress:
        bounded = math.sqrt(progress * c)
    else:
        bounded = c
    return weight * bounded * discount + ratio_penalty, discount, ratio_penalty


def _attribution(record: StepRecord, config: ContributionRewardConfig) -> tuple[float, float, float]:
    """(attribution, min discount, summed ratio penalty) over the non-fossilized seeds measured after the decision.

    A seed the decision culled or fossilized has no term: it is gone, or no longer the controller's to manage.
    """
    total, min_discount, penalties = 0.0, 1.0, 0.0
    after = record.after
    for info in after.slots.values():
        if info is None or info.stage == SeedStage.FOSSILIZED or info.counterfactual is None:
            continue
        term, discount, ratio_penalty = _slot_attribution(
            info, info.counterfactual, after.val_accuracy, config.contribution_weight
        )
        total += term
        min_discount = min(min_discount, discount)
        penalties += ratio_penalty
    return total, min_discount, penalties


def _blending_warning(slots: Mapping[str, SlotRewardInfo | None]) -> float:
    return sum(
        -BLENDING_WARNING_BASE - min(BLENDING_WARNING_PER_EPOCH * info.epochs_in_stage, BLENDING_WARNING_MAX)
        for info in slots.values()
        if info is not None and info.stage == SeedStage.BLENDING and info.total_improvement < 0
    )


def _probation_warning(record: StepRecord) -> float:
    """Nudges a decision on seeds that were ready to fossilize but left waiting; escalates, capped at −1 per seed."""
    decided = record.command.slot_id if record.command.op in (LifecycleOp.FOSSILIZE, LifecycleOp.CULL) else None
    total = 0.0
    for slot, info in record.before.slots.items():
        if info is None or info.stage != SeedStage.PROBATIONARY or not info.fossilize_ready or slot == decided:
            continue
        n = info.epochs_in_stage
        if n >= PROBATION_GRACE_EPOCHS:
            exponent = min(n - PROBATION_GRACE_EPOCHS, 8)  # the cap binds from exponent 3; avoids float overflow
            total -= min(PROBATION_WARNING_BASE * PROBATION_WARNING_GROWTH**exponent, PROBATION_WARNING_MAX)
    return total


def _fossilize_shaping(info: SlotRewardInfo, config: ContributionRewardConfig) -> float:
    c, ti = info.counterfactual, info.total_improvement
    if ti < 0:
        ransomware = c is not None and c > RANSOMWARE_MIN_CONTRIBUTION and ti < RANSOMWARE_MAX_IMPROVEMENT
        return (
            -FOSSILIZE_REGRESSED_PENALTY
            - min(FOSSILIZE_REGRESSION_SCALE * abs(ti), FOSSILIZE_REGRESSION_MAX)
            - (FOSSILIZE_RANSOMWARE_PENALTY if ransomware else 0.0)
        )
    if c is not None and c >= DEFAULT_MIN_FOSSILIZE_CONTRIBUTION:
        maturity = min(1.0, info.epochs_in_stage / MIN_PROBATION_EPOCHS)
        return (config.fossilize_base_bonus + config.fossilize_contribution_scale * c) * maturity
    return config.fossilize_noncontributing_penalty


def _cull_shaping(info: SlotRewardInfo, config: ContributionRewardConfig) -> float:
    c = info.counterfactual
    if c is None:
        return 0.0
    if c < config.cull_hurting_threshold:
        return config.cull_hurting_bonus
    if c < 0:
        return config.cull_acceptable_bonus
    return config.cull_good_seed_penalty - CULL_GOOD_SEED_SCALE * c


def _action_shaping(record: StepRecord, config: ContributionRewardConfig) -> float:
    op, info = record.command.op, record.target_info()
    if op == LifecycleOp.WAIT:
        return 0.0
    if op == LifecycleOp.GERMINATE:
        return config.germinate_cost
    assert info is not None  # StepRecord guarantees an occupied target for CULL/FOSSILIZE
    if op == LifecycleOp.FOSSILIZE:
        return config.fossilize_cost + _fossilize_shaping(info, config)
    return config.cull_cost + _cull_shaping(info, config)


def compute_contribution_reward(
    record: StepRecord, config: ContributionRewardConfig, gamma: float
) -> ShapedRewardComponents:
    after = record.after
    comp = base_components(record, "contribution", gamma, config.pbrs_weight)
    comp.attribution, comp.attribution_discount, comp.ratio_penalty = _attribution(record, config)
    unmeasured = any(
        info is not None and is_live_stage(SeedStage(info.stage)) and info.counterfactual is None
        for info in after.slots.values()
    )
    if unmeasured:
        comp.proxy = config.proxy_contribution_weight * max(after.acc_delta, 0.0)
    comp.blending_warning = _blending_warning(after.slots)
    comp.probation_warning = _probation_warning(record)
    comp.rent = rent(config.rent_weight, comp.growth_ratio, config.max_rent)
    comp.action_shaping = _action_shaping(record, config)
    if record.is_terminal:
        comp.terminal = (
            config.terminal_acc_weight * after.val_accuracy
            + config.fossilize_terminal_scale * after.fossilized_contributing
        )
    return comp
