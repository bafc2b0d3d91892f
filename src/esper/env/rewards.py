"""Reward families for the lifecycle controller.

Rewards are computed after the action and `step_epoch` from a `StepRecord`, so they see the true outcome of the step.
The contribution family pays for measured causal contribution, discounted when the host got worse since germination
(a "ransomware" seed makes itself indispensable without helping), and bounded by real progress; shaping is
potential-based over the lifecycle of all slots, so it cannot change the optimal policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from esper.env.potential import (
    STAGE_POTENTIALS,
    LifecycleSnapshot,
    lifecycle_potential,
    pbrs_shaping,
    slot_potential,
)
from esper.env.step_record import SUMMED_FIELDS, ShapedRewardComponents, SlotRewardInfo, StepRecord
from esper.leyline.actions import LifecycleOp
from esper.leyline.constants import (
    DEFAULT_CONTRIBUTION_WEIGHT,
    DEFAULT_FOSSILIZE_TERMINAL_SCALE,
    DEFAULT_GOVERNOR_DEATH_PENALTY,
    DEFAULT_MIN_FOSSILIZE_CONTRIBUTION,
    DEFAULT_PBRS_WEIGHT,
    DEFAULT_RENT_WEIGHT,
    MIN_PROBATION_EPOCHS,
)
from esper.leyline.stages import SeedStage, is_live_stage
from esper.runtime.tasks import TaskSpec

__all__ = [
    "INTERVENTION_COSTS",
    "STAGE_POTENTIALS",
    "SUMMED_FIELDS",
    "ContributionRewardConfig",
    "LifecycleSnapshot",
    "LossRewardConfig",
    "RewardConfig",
    "RewardFamily",
    "RewardFn",
    "ShapedRewardComponents",
    "SlotRewardInfo",
    "SparseRewardConfig",
    "StepRecord",
    "compute_contribution_reward",
    "compute_loss_reward",
    "compute_reward",
    "compute_sparse_reward",
    "lifecycle_potential",
    "make_reward_fn",
    "pbrs_shaping",
    "slot_potential",
]


class RewardFamily(StrEnum):
    CONTRIBUTION = "contribution"
    LOSS = "loss"
    SPARSE = "sparse"


INTERVENTION_COSTS: Mapping[LifecycleOp, float] = MappingProxyType(
    {LifecycleOp.WAIT: 0.0, LifecycleOp.GERMINATE: -0.02, LifecycleOp.CULL: -0.005, LifecycleOp.FOSSILIZE: -0.01}
)

# Fixed shape constants of the contribution family (deliberately not config fields).
ATTRIBUTION_SIGMOID_SLOPE = 10.0
BLENDING_WARNING_BASE, BLENDING_WARNING_PER_EPOCH, BLENDING_WARNING_MAX = 0.1, 0.05, 0.3
PROBATION_WARNING_BASE, PROBATION_WARNING_GROWTH, PROBATION_WARNING_MAX, PROBATION_GRACE_EPOCHS = 0.1, 3.0, 1.0, 2
FOSSILIZE_REGRESSED_PENALTY, FOSSILIZE_REGRESSION_SCALE, FOSSILIZE_REGRESSION_MAX = 0.5, 0.2, 1.0
FOSSILIZE_RANSOMWARE_PENALTY, RANSOMWARE_MIN_CONTRIBUTION, RANSOMWARE_MAX_IMPROVEMENT = 0.3, 0.1, -0.2
CULL_GOOD_SEED_SCALE = 0.05


@dataclass(frozen=True, slots=True)
class ContributionRewardConfig:
    contribution_weight: float = DEFAULT_CONTRIBUTION_WEIGHT
    proxy_contribution_weight: float = 0.3
    pbrs_weight: float = DEFAULT_PBRS_WEIGHT
    rent_weight: float = DEFAULT_RENT_WEIGHT
    max_rent: float = 8.0
    germinate_cost: float = -0.02
    fossilize_cost: float = -0.01
    cull_cost: float = -0.005
    fossilize_base_bonus: float = 0.5
    fossilize_contribution_scale: float = 0.1
    fossilize_noncontributing_penalty: float = -0.2
    cull_hurting_bonus: float = 0.3
    cull_acceptable_bonus: float = 0.1
    cull_good_seed_penalty: float = -0.3
    cull_hurting_threshold: float = -0.5
    terminal_acc_weight: float = 0.05
    fossilize_terminal_scale: float = DEFAULT_FOSSILIZE_TERMINAL_SCALE


LOSS_RENT_WEIGHT_BY_TASK_TYPE: Mapping[str, float] = MappingProxyType({"classification": 0.05, "lm": 0.01})


@dataclass(frozen=True, slots=True)
class LossRewardConfig:
    """Loss-family weights. The first four fields are per task (use `for_task`); the rest are fixed defaults."""

    typical_loss_delta_std: float
    compute_rent_weight: float
    baseline_loss: float
    target_loss: float
    loss_delta_weight: float = 5.0
    max_loss_delta: float = 5.0
    regression_penalty_scale: float = 0.5
    max_rent_penalty: float = 5.0
    grace_epochs: int = 3
    stage_potential_weight: float = 0.1
    terminal_loss_weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.typical_loss_delta_std > 0:
            raise ValueError(f"typical_loss_delta_std must be > 0, got {self.typical_loss_delta_std}")
        if not self.baseline_loss > self.target_loss:
            raise ValueError(f"baseline_loss {self.baseline_loss} must exceed target_loss {self.target_loss}")
        if self.grace_epochs < 0:
            raise ValueError(f"grace_epochs must be >= 0, got {self.grace_epochs}")

    @classmethod
    def for_task(
        cls, task_type: str, random_guess_loss: float, target_loss: float, typical_loss_delta_std: float
    ) -> LossRewardConfig:
        """Config from TaskSpec values: baseline = random-guess loss; rent weight by task type (lm params are cheap)."""
        if task_type not in LOSS_RENT_WEIGHT_BY_TASK_TYPE:
            raise ValueError(f"Unknown task_type '{task_type}'. Available: {sorted(LOSS_RENT_WEIGHT_BY_TASK_TYPE)}")
        return cls(
            typical_loss_delta_std=typical_loss_delta_std,
            compute_rent_weight=LOSS_RENT_WEIGHT_BY_TASK_TYPE[task_type],
            baseline_loss=random_guess_loss,
            target_loss=target_loss,
        )


@dataclass(frozen=True, slots=True)
class SparseRewardConfig:
    param_budget: int = 500_000
    param_penalty_weight: float = 0.1
    sparse_reward_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.param_budget <= 0:
            raise ValueError(f"param_budget must be > 0, got {self.param_budget}")


RewardConfig = ContributionRewardConfig | LossRewardConfig | SparseRewardConfig


def _clamp(x: float, lo: float, hi: float) -> float:
    """Clamp, mapping NaN to `lo`: a NaN measurement must never earn the best value (Python's min/max would)."""
    return lo if math.isnan(x) else max(lo, min(hi, x))


def _neg_sigmoid(x: float) -> float:
    """sigmoid(x) for x < 0 without overflow."""
    e = math.exp(x)
    return e / (1.0 + e)


def _rent(weight: float, growth: float, cap: float) -> float:
    return -min(weight * math.log1p(growth), cap)


def _base(record: StepRecord, family: RewardFamily, gamma: float, pbrs_weight: float) -> ShapedRewardComponents:
    """Components every family shares: potentials (logged always), shaping, governor penalty, action diagnostics."""
    return ShapedRewardComponents(
        family=family.value,
        pbrs=pbrs_shaping(record.prev_snapshot, record.next_snapshot, gamma, pbrs_weight),
        governor_penalty=-DEFAULT_GOVERNOR_DEATH_PENALTY if record.rollback else 0.0,
        growth_ratio=record.seed_param_count_total / record.host_param_count,
        phi_prev=lifecycle_potential(record.prev_snapshot),
        phi_next=lifecycle_potential(record.next_snapshot),
        val_acc=record.val_acc,
        action_name=record.command.op.name,
        action_success=record.action_success,
    )


def _slot_attribution(info: SlotRewardInfo, c: float, val_acc: float, weight: float) -> tuple[float, float, float]:
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
    progress = 0.0 if info.acc_at_germination is None else val_acc - info.acc_at_germination
    if progress <= 0:
        bounded = 0.0
    elif c >= progress:
        bounded = math.sqrt(progress * c)
    else:
        bounded = c
    return weight * bounded * discount + ratio_penalty, discount, ratio_penalty


def _attribution(record: StepRecord, config: ContributionRewardConfig) -> tuple[float, float, float]:
    """(attribution, min discount, summed ratio penalty) over non-fossilized seeds with a measured contribution."""
    total, min_discount, penalties = 0.0, 1.0, 0.0
    op, target = record.command.op, record.command.slot_id
    for slot, info in record.slots.items():
        if info is None or info.stage == SeedStage.FOSSILIZED or info.counterfactual is None:
            continue
        term, discount, ratio_penalty = _slot_attribution(
            info, info.counterfactual, record.val_acc, config.contribution_weight
        )
        if slot == target:
            if op == LifecycleOp.FOSSILIZE and info.total_improvement < 0:
                term = 0.0
            elif op == LifecycleOp.CULL:
                term = -term
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
    """Nudges a decision on seeds that are ready to fossilize but left waiting; escalates, capped at −1 per seed."""
    decided = record.command.slot_id if record.command.op in (LifecycleOp.FOSSILIZE, LifecycleOp.CULL) else None
    total = 0.0
    for slot, info in record.slots.items():
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
    comp = _base(record, RewardFamily.CONTRIBUTION, gamma, config.pbrs_weight)
    comp.attribution, comp.attribution_discount, comp.ratio_penalty = _attribution(record, config)
    unmeasured = any(
        info is not None and is_live_stage(SeedStage(info.stage)) and info.counterfactual is None
        for info in record.slots.values()
    )
    if unmeasured:
        comp.proxy = config.proxy_contribution_weight * max(record.acc_delta, 0.0)
    comp.blending_warning = _blending_warning(record.slots)
    comp.probation_warning = _probation_warning(record)
    comp.rent = _rent(config.rent_weight, comp.growth_ratio, config.max_rent)
    comp.action_shaping = _action_shaping(record, config)
    if record.is_terminal:
        comp.terminal = (
            config.terminal_acc_weight * record.val_acc
            + config.fossilize_terminal_scale * record.fossilized_contributing
        )
    return comp


def compute_loss_reward(record: StepRecord, config: LossRewardConfig, gamma: float) -> ShapedRewardComponents:
    """Dense loss-improvement reward (loss_delta > 0 is an improvement); regressions cost half as much."""
    comp = _base(record, RewardFamily.LOSS, gamma, config.stage_potential_weight)
    bound = config.max_loss_delta
    normalized = _clamp(record.loss_delta / config.typical_loss_delta_std, -bound, bound)
    if normalized < 0:
        normalized *= config.regression_penalty_scale
    comp.loss_primary = config.loss_delta_weight * normalized
    aged = sum(params for age, params in record.seed_param_counts if age >= config.grace_epochs)
    comp.rent = _rent(config.compute_rent_weight, aged / record.host_param_count, config.max_rent_penalty)
    comp.action_shaping = INTERVENTION_COSTS[record.command.op]
    if record.is_terminal:
        progress = (config.baseline_loss - record.val_loss) / (config.baseline_loss - config.target_loss)
        comp.terminal = config.terminal_loss_weight * _clamp(progress, 0.0, 1.0)
    return comp


def compute_sparse_reward(record: StepRecord, config: SparseRewardConfig, gamma: float) -> ShapedRewardComponents:
    """Only the episode outcome (best accuracy minus a parameter charge) and the governor penalty; no shaping."""
    comp = _base(record, RewardFamily.SPARSE, gamma, 0.0)
    if record.is_terminal:
        charge = config.param_penalty_weight * record.seed_param_count_total / config.param_budget
        comp.sparse_terminal = _clamp(config.sparse_reward_scale * (record.host_max_acc / 100.0 - charge), -1.0, 1.0)
    return comp


def compute_reward(
    record: StepRecord, family: RewardFamily | str, config: RewardConfig | None, gamma: float
) -> ShapedRewardComponents:
    """Dispatch to the family. `config=None` uses the defaults (contribution, sparse); the loss family needs one."""
    family = RewardFamily(family)
    if family == RewardFamily.CONTRIBUTION:
        config = ContributionRewardConfig() if config is None else config
        if isinstance(config, ContributionRewardConfig):
            return compute_contribution_reward(record, config, gamma)
    elif family == RewardFamily.LOSS:
        if config is None:
            raise ValueError("The loss family needs a per-task LossRewardConfig (LossRewardConfig.for_task)")
        if isinstance(config, LossRewardConfig):
            return compute_loss_reward(record, config, gamma)
    else:
        config = SparseRewardConfig() if config is None else config
        if isinstance(config, SparseRewardConfig):
            return compute_sparse_reward(record, config, gamma)
    raise TypeError(f"{type(config).__name__} does not configure the {family.value} family")


RewardFn = Callable[[StepRecord], ShapedRewardComponents]


def make_reward_fn(family: RewardFamily | str, task: TaskSpec, gamma: float,
                   sparse: SparseRewardConfig | None = None) -> RewardFn:
    """Reward function of a family, configured for the task (the loss family needs the task's loss scales)."""
    family = RewardFamily(family)
    config: Any = None
    if family == RewardFamily.LOSS:
        config = LossRewardConfig.for_task(task.task_type, task.random_guess_loss, task.target_loss,
                                           task.typical_loss_delta_std)
    elif family == RewardFamily.SPARSE:
        config = sparse or SparseRewardConfig()
    return lambda record: compute_reward(record, family, config, gamma)
