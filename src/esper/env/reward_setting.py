"""`RewardSetting`: the reward a policy learns from, with what it charges growth (λ_p or λ_c) and the discount of the
return it maximizes (which every family's potential-based shaping uses too)."""

from __future__ import annotations

from typing import ClassVar, Self

from pydantic import Field, StrictFloat, StrictInt, model_validator

from esper.env.charges import Charge, ComputeCostOrAuto, ParamCost, ParamCostOrAuto
from esper.env.rewards import RewardFamily, SparseRewardConfig
from esper.leyline.constants import DEFAULT_GAMMA, MAX_PARAM_BUDGET, MAX_WEIGHT
from esper.leyline.errors import UserInputError
from esper.leyline.strict_config import StrictConfig

__all__ = ["RewardSetting"]

_SPARSE = SparseRewardConfig()


class RewardSetting(StrictConfig):
    """The reward family, its charge and λ (given, "auto": measured before training, or none: the task's measured
    one), λ_p per training type of a family run, the sparse reward's terms, and the discount γ."""

    KIND: ClassVar[str] = "reward setting"
    reward_family: RewardFamily = Field(default=RewardFamily.GAP, description="the reward the policy learns from")
    param_cost: ParamCostOrAuto | None = Field(default=None,
                                               description="gap reward's λ_p, pp per 100 % of added parameters; "
                                                           "'auto': measured for this run's setting before training "
                                                           "(and cached); none: the task's, measured at the nearest "
                                                           "sample cap")
    charge: Charge = Field(default="param",
                           description="what the gap reward charges growth: 'param', λ_p per 100 % of added "
                                       "parameters (and a small cost per intervention), or 'compute', λ_c per 100 % "
                                       "more training compute than the static twin (the return is then accuracy "
                                       "above the static frontier at equal training compute)")
    compute_cost: ComputeCostOrAuto | None = Field(default=None,
                                                   description="with charge 'compute': gap reward's λ_c, pp per 100 % "
                                                               "more training compute; 'auto': measured for this "
                                                               "run's setting before training (and cached); none: "
                                                               "the task's, measured at the nearest sample cap")
    type_param_costs: dict[str, ParamCost] | None = Field(default=None,
                                                          description="with family and the gap reward: λ_p per "
                                                                      "training type, type name → pp per 100 % of "
                                                                      "added parameters (param_cost 'auto' measures "
                                                                      "them)")
    param_budget: StrictInt = Field(default=_SPARSE.param_budget, ge=1, le=MAX_PARAM_BUDGET,
                                    description="sparse reward's parameter budget")
    param_penalty_weight: StrictFloat = Field(default=_SPARSE.param_penalty_weight, ge=0.0, le=MAX_WEIGHT,
                                              description="sparse reward's weight of parameters over the budget")
    sparse_reward_scale: StrictFloat = Field(default=_SPARSE.sparse_reward_scale, gt=0.0, le=1e6,
                                             description="sparse reward's scale")
    gamma: StrictFloat = Field(default=DEFAULT_GAMMA, gt=0.0, le=1.0,
                               description="discount of the return the policy maximizes (and of the reward's "
                                           "potential-based shaping)")

    @model_validator(mode="after")
    def _consistency(self) -> Self:
        gap = self.reward_family == RewardFamily.GAP
        checks = [
            (gap or self.param_cost is None, "param_cost only applies to reward_family 'gap'"),
            (gap or self.charge == "param",
             "charge only applies to reward_family 'gap': drop charge or set reward_family gap"),
            (self.charge == "compute" or self.compute_cost is None,
             "compute_cost only applies to charge 'compute': add --set charge=compute, or drop compute_cost (in "
             "--config-json set \"compute_cost\": null; --set charge=param clears a preset's compute_cost)"),
            (self.charge == "param" or self.param_cost is None,
             "charge 'compute' prices training compute instead of parameters: to charge parameters, add --set "
             "charge=param beside param_cost; otherwise drop param_cost (in --config-json set \"param_cost\": null) "
             "and give λ_c as compute_cost (a number, or compute_cost 'auto' to measure it)"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserInputError(message)
        if self.reward_family != RewardFamily.SPARSE:
            changed = [k for k in ("param_budget", "param_penalty_weight", "sparse_reward_scale")
                       if getattr(self, k) != getattr(_SPARSE, k)]
            if changed:
                raise UserInputError(f"{changed} only apply to reward_family 'sparse' "
                                     f"(got '{self.reward_family.value}')")
        return self

    def sparse(self) -> SparseRewardConfig:
        """The sparse reward's terms."""
        return SparseRewardConfig(param_budget=self.param_budget, param_penalty_weight=self.param_penalty_weight,
                                  sparse_reward_scale=self.sparse_reward_scale)

    def charged_param_cost(self, itype: str | None = None) -> float | None:
        """The λ_p the reward charges (None: the task's measured one, or no λ_p for a reward without one); in a
        family run, on training type `itype`. "auto" is measured by the command line (`esper train ppo`,
        `esper study`) before training, so a setting that still says "auto" here is refused."""
        if isinstance(self.param_cost, str):  # AUTO_COST, the one string the field accepts
            raise UserInputError("param_cost 'auto' is measured by `esper train ppo` and `esper study` before training;"
                                 " from Python, measure it with esper.evaluation.param_cost.cached_costs and pass "
                                 "the number")
        if self.type_param_costs is not None:
            assert itype is not None, "a family run charges λ_p per training type"
            return self.type_param_costs[itype]
        return self.param_cost

    def charged_compute_cost(self) -> float | None:
        """The λ_c the reward charges (None: the task's measured one, or none where the charge is not 'compute');
        "auto" is refused as in `charged_param_cost`."""
        if isinstance(self.compute_cost, str):  # AUTO_COST
            raise UserInputError("compute_cost 'auto' is measured by `esper train ppo` and `esper study` before "
                                 "training; from Python, measure it with esper.evaluation.param_cost.cached_costs and "
                                 "pass the number")
        return self.compute_cost
