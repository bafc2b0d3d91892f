"""Reward families for the lifecycle controller; every one is a pure function of a decision's `StepRecord`.

* `gap` (default): how much better the grown network is than its static twin (the same host, seed and data, trained
  without growth), per parameter added. r_e = (g_{e+1} − g_e) − λ_p·(p_{e+1} − p_e) − c(a_e) with g the accuracy gap
  to the twin in pp (for language models 100 × the twin's validation loss minus the env's), p the seed parameters
  per host parameter and c a small cost per intervention. Undiscounted, an episode's return telescopes to
  g_T − λ_p·p_T − Σc: a positive return means growing beat training the same network, and beat widening it when
  λ_p is the task's measured accuracy gain per 100 % of added width.
* `contribution`: measured causal contribution plus lifecycle shaping (see `esper.env.contribution`).
* `loss`: dense validation-loss improvement with a parameter rent.
* `sparse`: the episode's best accuracy minus a parameter charge, at the end only.
Every family's potential-based shaping uses a zero terminal potential, so shaping never changes which policy is best.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import ClassVar, Self

from pydantic import Field, StrictBool, StrictFloat, StrictInt, model_validator

from esper.env.contribution import ContributionRewardConfig, compute_contribution_reward
from esper.env.shared_terms import base_components, clamp, rent
from esper.env.step_record import SUMMED_FIELDS, Measurement, ShapedRewardComponents, StepRecord
from esper.leyline.actions import LifecycleOp
from esper.leyline.constants import MAX_PARAM_BUDGET, MAX_WEIGHT
from esper.leyline.strict_config import EpochCount, StrictConfig, Weight
from esper.runtime.param_costs import ParamCost, measured_param_cost, missing_param_cost
from esper.runtime.tasks import TaskSpec

__all__ = [
    "INTERVENTION_COSTS",
    "NOT_CHARGED",
    "SUMMED_FIELDS",
    "ContributionRewardConfig",
    "GapRewardConfig",
    "LossRewardConfig",
    "RewardConfig",
    "RewardFamily",
    "RewardFn",
    "ShapedRewardComponents",
    "SparseRewardConfig",
    "StepRecord",
    "compute_gap_reward",
    "compute_loss_reward",
    "compute_reward",
    "compute_sparse_reward",
    "make_reward_fn",
    "needs_twin",
    "reward_config",
    "reward_summary",
]


class RewardFamily(StrEnum):
    GAP = "gap"
    CONTRIBUTION = "contribution"
    LOSS = "loss"
    SPARSE = "sparse"


INTERVENTION_COSTS: Mapping[LifecycleOp, float] = MappingProxyType(
    {LifecycleOp.WAIT: 0.0, LifecycleOp.GERMINATE: -0.02, LifecycleOp.CULL: -0.005, LifecycleOp.FOSSILIZE: -0.01}
)


class GapRewardConfig(StrictConfig):
    """`param_cost` λ_p: pp of accuracy per 100 % of added parameters. `lm`: measure the gap in validation loss.
    `charged` False: no λ_p is known for the run and nothing learns from its reward, so the parameter term is left
    out (λ_p 0) and the reward says so."""

    KIND: ClassVar[str] = "gap reward config"
    param_cost: ParamCost
    lm: StrictBool = False
    charged: StrictBool = True


LOSS_RENT_WEIGHT_BY_TASK_TYPE: Mapping[str, float] = MappingProxyType({"classification": 0.05, "lm": 0.01})


class LossRewardConfig(StrictConfig):
    """Loss-family weights. The first four fields are per task (use `for_task`); the rest are fixed defaults."""

    KIND: ClassVar[str] = "loss reward config"
    typical_loss_delta_std: StrictFloat = Field(gt=0.0, le=MAX_WEIGHT)
    compute_rent_weight: Weight
    baseline_loss: Weight
    target_loss: Weight
    loss_delta_weight: Weight = 5.0
    max_loss_delta: Weight = 5.0
    regression_penalty_scale: Weight = 0.5
    max_rent_penalty: Weight = 5.0
    grace_epochs: EpochCount = 3
    stage_potential_weight: Weight = 0.1
    terminal_loss_weight: Weight = 1.0

    @model_validator(mode="after")
    def _baseline_above_target(self) -> Self:
        if not self.baseline_loss > self.target_loss:
            raise ValueError(f"baseline_loss {self.baseline_loss} must exceed target_loss {self.target_loss}")
        return self

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


class SparseRewardConfig(StrictConfig):
    KIND: ClassVar[str] = "sparse reward config"
    param_budget: StrictInt = Field(default=500_000, ge=1, le=MAX_PARAM_BUDGET)
    param_penalty_weight: StrictFloat = Field(default=0.1, ge=0.0, le=MAX_WEIGHT)
    sparse_reward_scale: StrictFloat = Field(default=1.0, gt=0.0, le=MAX_WEIGHT)


RewardConfig = GapRewardConfig | ContributionRewardConfig | LossRewardConfig | SparseRewardConfig


def gap_to_twin(m: Measurement, lm: bool) -> float:
    """g: the env's lead over its static twin in the same epoch (pp of accuracy, or 100 × loss for LM tasks).

    A diverged epoch (either loss not finite) has no measurable loss gap and counts as none: the rewards stay
    finite, the governor penalty charges the divergence, and the return still telescopes because every g is a
    function of its own measurement.
    """
    if m.twin_val_accuracy is None or m.twin_val_loss is None:
        raise ValueError("The gap reward needs a static twin's measurement (build the env with its twin)")
    if lm:
        gap = 100.0 * (m.twin_val_loss - m.val_loss)
        return gap if math.isfinite(gap) else 0.0
    return m.val_accuracy - m.twin_val_accuracy


def compute_gap_reward(record: StepRecord, config: GapRewardConfig) -> ShapedRewardComponents:
    comp = base_components(record, RewardFamily.GAP.value, 1.0, 0.0)
    before, after = record.before, record.after
    comp.gap = gap_to_twin(after, config.lm) - gap_to_twin(before, config.lm)
    comp.param_cost = -config.param_cost * (after.param_ratio - before.param_ratio)
    comp.action_shaping = INTERVENTION_COSTS[record.command.op]
    return comp


def compute_loss_reward(record: StepRecord, config: LossRewardConfig, gamma: float) -> ShapedRewardComponents:
    """Dense loss-improvement reward (loss_delta > 0 is an improvement); regressions cost half as much."""
    comp = base_components(record, RewardFamily.LOSS.value, gamma, config.stage_potential_weight)
    after = record.after
    bound = config.max_loss_delta
    normalized = clamp(after.loss_delta / config.typical_loss_delta_std, -bound, bound)
    if normalized < 0:
        normalized *= config.regression_penalty_scale
    comp.loss_primary = config.loss_delta_weight * normalized
    aged = sum(params for age, params in after.seed_param_counts if age >= config.grace_epochs)
    comp.rent = rent(config.compute_rent_weight, aged / after.host_param_count, config.max_rent_penalty)
    comp.action_shaping = INTERVENTION_COSTS[record.command.op]
    if record.is_terminal:
        progress = (config.baseline_loss - after.val_loss) / (config.baseline_loss - config.target_loss)
        comp.terminal = config.terminal_loss_weight * clamp(progress, 0.0, 1.0)
    return comp


def compute_sparse_reward(record: StepRecord, config: SparseRewardConfig) -> ShapedRewardComponents:
    """Only the episode outcome (best accuracy minus a parameter charge) and the governor penalty; no shaping."""
    comp = base_components(record, RewardFamily.SPARSE.value, 1.0, 0.0)
    after = record.after
    if record.is_terminal:
        charge = config.param_penalty_weight * after.seed_param_count_total / config.param_budget
        comp.sparse_terminal = clamp(config.sparse_reward_scale * (after.best_val_accuracy / 100.0 - charge), -1.0, 1.0)
    return comp


def compute_reward(record: StepRecord, config: RewardConfig, gamma: float) -> ShapedRewardComponents:
    """Dispatch on the config's type (each family has exactly one config type)."""
    if isinstance(config, GapRewardConfig):
        return compute_gap_reward(record, config)
    if isinstance(config, ContributionRewardConfig):
        return compute_contribution_reward(record, config, gamma)
    if isinstance(config, LossRewardConfig):
        return compute_loss_reward(record, config, gamma)
    return compute_sparse_reward(record, config)


RewardFn = Callable[[StepRecord], ShapedRewardComponents]
NOT_CHARGED = "not charged"
"""What runs record as λ_p when the parameter term was left out of a reward that nothing learns from."""


def reward_config(family: RewardFamily | str, task: TaskSpec, sparse: SparseRewardConfig | None = None,
                  param_cost: float | None = None, *, max_train_samples: int | None = None,
                  logged_only: bool = False) -> RewardConfig:
    """A family's config for a task: gap needs a parameter cost (`param_cost`, or the one measured for the task
    at the training-sample cap nearest `max_train_samples`), loss the task's loss scales. `logged_only`: nothing
    learns from the reward (heuristic, compare, a study's evaluation), so a missing λ_p leaves the parameter term
    uncharged instead of refusing the run."""
    family = RewardFamily(family)
    if family == RewardFamily.GAP:
        lm = task.task_type == "lm"
        cost = param_cost if param_cost is not None else measured_param_cost(task.name, max_train_samples)
        if cost is None and logged_only:
            return GapRewardConfig(param_cost=0.0, lm=lm, charged=False)
        if cost is None:
            raise missing_param_cost(task.name, max_train_samples)
        return GapRewardConfig(param_cost=cost, lm=lm)
    if family == RewardFamily.LOSS:
        return LossRewardConfig.for_task(task.task_type, task.random_guess_loss, task.target_loss,
                                         task.typical_loss_delta_std)
    if family == RewardFamily.SPARSE:
        return sparse or SparseRewardConfig()
    return ContributionRewardConfig()


def resolved_param_cost(family: RewardFamily | str, task: TaskSpec, param_cost: float | None = None, *,
                        max_train_samples: int | None = None, logged_only: bool = False) -> float | str | None:
    """The λ_p a gap reward charges (the given one, or the task's measured at the nearest sample cap), or
    `NOT_CHARGED`; None for the other families. Runs record this value, not the null that means "the task's"."""
    config = reward_config(family, task, param_cost=param_cost, max_train_samples=max_train_samples,
                           logged_only=logged_only)
    if not isinstance(config, GapRewardConfig):
        return None
    return config.param_cost if config.charged else NOT_CHARGED


def reward_summary(family: RewardFamily | str, task: TaskSpec, param_cost: float | None = None, *,
                   max_train_samples: int | None = None, logged_only: bool = False) -> str:
    """The reward a run computes, with the parameter cost it resolved to: runs record it, since a default λ_p
    depends on the task and the sample cap."""
    config = reward_config(family, task, param_cost=param_cost, max_train_samples=max_train_samples,
                           logged_only=logged_only)
    if isinstance(config, GapRewardConfig) and not config.charged:
        return f"gap, λ_p {NOT_CHARGED} (none measured near this sample cap; the reward is only logged)"
    if isinstance(config, GapRewardConfig):
        return f"gap, λ_p {config.param_cost:g}"
    return RewardFamily(family).value


def make_reward_fn(family: RewardFamily | str, task: TaskSpec, gamma: float,
                   sparse: SparseRewardConfig | None = None, param_cost: float | None = None, *,
                   max_train_samples: int | None = None) -> RewardFn:
    """The reward function of a family, configured for the task (and, for gap, the run's training-sample cap)."""
    config = reward_config(family, task, sparse, param_cost, max_train_samples=max_train_samples)
    return lambda record: compute_reward(record, config, gamma)


def needs_twin(family: RewardFamily | str) -> bool:
    """Whether a family's reward compares with the static twin (so its envs must train one)."""
    return RewardFamily(family) == RewardFamily.GAP

