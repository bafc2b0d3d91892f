"""Reward families for the lifecycle controller; every one is a pure function of a decision's `StepRecord`.

* `gap` (default): how much better the grown network is than its static twin (the same host, seed and data, trained
  without growth), net of what the growth cost. g is the accuracy gap to the twin in pp (for language models 100 × the
  twin's validation loss minus the env's). Its `charge` says what growth costs:
  - `param` (default): r_e = (g_{e+1} − g_e) − λ_p·(p_{e+1} − p_e) − c(a_e) with p the seed parameters per host
    parameter and c a small cost per intervention. Undiscounted, an episode's return telescopes to g_T − λ_p·p_T − Σc:
    a positive return means growing beat training the same network, and beat widening it when λ_p is the task's
    measured accuracy gain per 100 % of added width.
  - `compute`: r_e = (g_{e+1} − g_e) − λ_c·(x_{e+1} − x_e)/D with x_e = F_env(e) − F_twin(e) the training FLOPs the
    env has spent beyond its twin by the end of epoch e (everything their FlopMeters count: host, seeds, incubator,
    counterfactual and probe passes) and D = T·F_twin(e)/e the twin's whole-episode FLOPs (a static host's epochs
    all cost the same, so D is one number from epoch 1 on; a twin whose epochs differ is refused). The first epoch
    runs before any decision, so g_1 = x_1 = 0 and the return telescopes to exactly g_T − λ_c·(F_env(T)/F_twin(T) − 1):
    accuracy above the linearized static frontier at equal training compute, when λ_c is the task's measured
    accuracy gain per 100 % more training compute. The intervention costs are left out: an intervention's compute is
    already priced.
  Both keep the governor's penalty for a rollback (every family does): a diverged epoch has no measurable gap, so a
  return without it could not see the divergence; an episode without one returns exactly the objective.
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

from esper.data.tasks import TaskSpec
from esper.env.charges import CHARGES, Charge, ParamCost, charged_cost
from esper.env.contribution import ContributionRewardConfig, compute_contribution_reward
from esper.env.shared_terms import base_components, clamp, rent
from esper.env.step_record import SUMMED_FIELDS, Measurement, ShapedRewardComponents, StepRecord
from esper.leyline.actions import LifecycleOp
from esper.leyline.constants import MAX_PARAM_BUDGET, MAX_WEIGHT
from esper.leyline.errors import UserInputError
from esper.leyline.strict_config import EpochCount, StrictConfig, Weight

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
    "resolved_cost",
    "reward_config",
    "reward_summary",
    "twin_episode_flops",
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
    """`cost`: the `charge`'s λ, pp of accuracy per 100 % of added parameters (λ_p) or of added training compute (λ_c).
    `lm`: measure the gap in validation loss. `charged` False: no λ is known for the run and nothing learns from its
    reward, so the charge is left out (λ 0) and the reward says so."""

    KIND: ClassVar[str] = "gap reward config"
    cost: ParamCost
    charge: Charge = "param"
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


def twin_episode_flops(record: StepRecord) -> float:
    """D: the static twin's training FLOPs over the whole episode, T × its FLOPs per epoch. Its epochs run the same
    passes on the same shapes, so every record of an episode yields the same D, the sum of the compute charges
    telescopes, and a twin whose epochs cost differently is a fault, refused here."""
    before, after = record.before.twin_train_flops, record.after.twin_train_flops
    if before is None or after is None:
        raise ValueError("The compute charge needs the static twin's training FLOPs (build the env with a live twin)")
    if before <= 0 or before * record.after.epoch != after * record.before.epoch:
        raise ValueError(f"The static twin's epochs must cost the same positive FLOPs: {before} by epoch "
                         f"{record.before.epoch}, {after} by epoch {record.after.epoch}")
    return record.max_epochs * before / record.before.epoch


def compute_gap_reward(record: StepRecord, config: GapRewardConfig) -> ShapedRewardComponents:
    """The gap's change, minus the charge: λ_p per added parameter ratio and the intervention costs (`param`), or λ_c
    per added share of the twin's episode FLOPs, logged as `rent` (`compute`)."""
    comp = base_components(record, RewardFamily.GAP.value, 1.0, 0.0)
    before, after = record.before, record.after
    comp.gap = gap_to_twin(after, config.lm) - gap_to_twin(before, config.lm)
    if config.charge == "param":
        comp.param_cost = -config.cost * (after.param_ratio - before.param_ratio)
        comp.action_shaping = INTERVENTION_COSTS[record.command.op]
        return comp
    episode_flops = twin_episode_flops(record)
    assert before.twin_train_flops is not None and after.twin_train_flops is not None  # twin_episode_flops checked
    extra = (after.train_flops - after.twin_train_flops) - (before.train_flops - before.twin_train_flops)
    comp.rent = -config.cost * extra / episode_flops
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
"""What runs record as λ when the charge was left out of a reward that nothing learns from."""


def reward_config(family: RewardFamily | str, task: TaskSpec, sparse: SparseRewardConfig | None = None,
                  param_cost: float | None = None, *, charge: Charge = "param", compute_cost: float | None = None,
                  max_train_samples: int | None = None, logged_only: bool = False) -> RewardConfig:
    """A family's config for a task: gap needs its charge's cost (`param_cost` λ_p or `compute_cost` λ_c, else the one
    measured for the task at the training-sample cap nearest `max_train_samples`), loss the task's loss scales.
    `logged_only`: nothing learns from the reward (heuristic, compare, a study's evaluation), so a missing λ leaves
    the charge out instead of refusing the run."""
    family = RewardFamily(family)
    if family == RewardFamily.GAP:
        if charge == "param" and compute_cost is not None:
            raise UserInputError("compute_cost is λ_c, the price of training compute: charge it with charge 'compute'"
                                 ", or drop it")
        if charge == "compute" and param_cost is not None:
            raise UserInputError("charge 'compute' prices training compute instead of parameters: drop param_cost "
                                 "(give λ_c as compute_cost), or charge 'param'")
        given = param_cost if charge == "param" else compute_cost
        cost = charged_cost(charge, task.name, given, max_train_samples, logged_only=logged_only)
        return GapRewardConfig(cost=0.0 if cost is None else cost, charge=charge, lm=task.task_type == "lm",
                               charged=cost is not None)
    if family == RewardFamily.LOSS:
        return LossRewardConfig.for_task(task.task_type, task.random_guess_loss, task.target_loss,
                                         task.typical_loss_delta_std)
    if family == RewardFamily.SPARSE:
        return sparse or SparseRewardConfig()
    return ContributionRewardConfig()


def resolved_cost(family: RewardFamily | str, task: TaskSpec, param_cost: float | None = None, *,
                  charge: Charge = "param", compute_cost: float | None = None, max_train_samples: int | None = None,
                  logged_only: bool = False) -> dict[str, float | str]:
    """The λ a gap reward charges (the given one, or the task's measured at the nearest sample cap, or
    `NOT_CHARGED`) under its charge's field name (`param_cost` or `compute_cost`); {} for the other families. Runs
    record this value, not the null that means "the task's"."""
    config = reward_config(family, task, param_cost=param_cost, charge=charge, compute_cost=compute_cost,
                           max_train_samples=max_train_samples, logged_only=logged_only)
    if not isinstance(config, GapRewardConfig):
        return {}
    return {CHARGES[config.charge].field: config.cost if config.charged else NOT_CHARGED}


def reward_summary(family: RewardFamily | str, task: TaskSpec, param_cost: float | None = None, *,
                   charge: Charge = "param", compute_cost: float | None = None, max_train_samples: int | None = None,
                   logged_only: bool = False) -> str:
    """The reward a run computes, with the charge and the cost it resolved to: runs record it, since a default λ
    depends on the task and the sample cap."""
    config = reward_config(family, task, param_cost=param_cost, charge=charge, compute_cost=compute_cost,
                           max_train_samples=max_train_samples, logged_only=logged_only)
    if not isinstance(config, GapRewardConfig):
        return RewardFamily(family).value
    symbol = CHARGES[config.charge].symbol
    if not config.charged:
        return f"gap, {symbol} {NOT_CHARGED} (none measured near this sample cap; the reward is only logged)"
    if config.charge == "param":
        return f"gap, {symbol} {config.cost:g}"
    return f"gap, {symbol} {config.cost:g} per 100 % {CHARGES['compute'].per}"


def make_reward_fn(family: RewardFamily | str, task: TaskSpec, gamma: float,
                   sparse: SparseRewardConfig | None = None, param_cost: float | None = None, *,
                   max_train_samples: int | None = None) -> RewardFn:
    """The reward function of a family, configured for the task (and, for gap, the run's training-sample cap); gap
    charges parameters."""
    config = reward_config(family, task, sparse, param_cost, max_train_samples=max_train_samples)
    return lambda record: compute_reward(record, config, gamma)


def needs_twin(family: RewardFamily | str) -> bool:
    """Whether a family's reward compares with the static twin (so its envs must train one)."""
    return RewardFamily(family) == RewardFamily.GAP

