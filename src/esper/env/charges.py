"""The `gap` reward's charges: what a grown network pays per parameter added (λ_p) and per unit of training compute
added (λ_c), and the one rule that says which λ a run charges.

Both are slopes of the static host's final validation accuracy, fitted over widths 1.0, 1.5 and 2.0 on the same paired
episodes: λ_p against the added-parameter ratio params(w) / params(1) − 1, λ_c against the added-training-compute
ratio F(w) / F(1) − 1 (F: an episode's training FLOPs), each in pp per 100 %. Charging a grown network this much makes a
positive `gap` return mean that growing beat simply training a wider network of the same size (λ_p) or the same
training compute (λ_c). What widening buys depends on how much data the host sees (on 192 samples a wider host gains
twelve times what it gains on 2,048), so a task keeps one calibration per measured training-sample cap and a run uses
the one nearest its own cap, if that is within a factor of `MAX_CAP_RATIO` of it. Each entry records the command that
measured it.

The charges live beside the reward that charges them: the types every config and flag validates them with, the
"auto" request, the calibrations, and `charged_cost`, the rule every reward, config and dataset resolves a charge
through (the λ given, else the one measured for the task nearest the run's sample cap, else none: a reward something
learns from refuses, one that is only logged leaves the charge out). Measuring a λ runs episodes of the static host, so
the measurement lives with the comparisons that run them (`esper.evaluation.param_cost`).
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, Literal, overload

from pydantic import Field, StrictFloat, ValidationError, WrapValidator

from esper.data.synthetic import SYNTHETIC_SPLIT_SIZES
from esper.leyline.errors import UserInputError

__all__ = [
    "AUTO_COST",
    "CALIBRATIONS",
    "CHARGES",
    "MAX_CAP_RATIO",
    "MAX_COST",
    "Calibration",
    "Charge",
    "ChargeInfo",
    "ComputeCost",
    "ComputeCostOrAuto",
    "ParamCost",
    "ParamCostOrAuto",
    "TaskCalibrations",
    "calibration_coverage",
    "charged_cost",
    "measured_cost",
    "missing_cost",
]

Charge = Literal["param", "compute"]
"""What the gap reward charges a grown network for: its added parameters (λ_p) or its added training compute (λ_c)."""


@dataclass(frozen=True)
class ChargeInfo:
    """How messages and records name a charge: its symbol, its config field, what one 100 % is of."""

    symbol: str
    field: str
    per: str


CHARGES: MappingProxyType[str, ChargeInfo] = MappingProxyType({
    "param": ChargeInfo("λ_p", "param_cost", "added parameters"),
    "compute": ChargeInfo("λ_c", "compute_cost", "training compute"),
})

MAX_COST = 1e6
ParamCost = Annotated[StrictFloat, Field(ge=0.0, le=MAX_COST)]
"""λ_p as every config and flag takes it: a finite number of pp per 100 % of added parameters (a bool is refused)."""
ComputeCost = Annotated[StrictFloat, Field(ge=0.0, le=MAX_COST)]
"""λ_c as every config and flag takes it: a finite number of pp per 100 % of added training compute."""
AUTO_COST = "auto"
"""The cost that asks a learning command to measure its charge for its setting (or reuse that measurement)."""


def _cost_or_auto(per: str) -> Callable[[Any, Callable[[Any], Any]], Any]:
    """One message for the two accepted forms instead of one per branch of the union."""
    def validate(value: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(f"must be a number in [0, {MAX_COST:,.0f}] (pp per 100 % of {per}) or '{AUTO_COST}', "
                             f"got {json.dumps(value, default=str)}") from None
    return validate


ParamCostOrAuto = Annotated[ParamCost | Literal["auto"], WrapValidator(_cost_or_auto(CHARGES["param"].per))]
"""λ_p, or `AUTO_COST`: what the learning commands' configs take."""
ComputeCostOrAuto = Annotated[ComputeCost | Literal["auto"], WrapValidator(_cost_or_auto(CHARGES["compute"].per))]
"""λ_c, or `AUTO_COST`: what the learning commands' configs take."""


@dataclass(frozen=True)
class Calibration:
    """One measurement of both charges: the points (one per width) and the slopes fitted to them."""

    param_cost: float
    compute_cost: float
    max_train_samples: int
    max_val_samples: int
    widths: tuple[float, ...]
    added_param_ratios: tuple[float, ...]
    added_flop_ratios: tuple[float, ...]
    mean_final_accuracy: tuple[float, ...]
    episodes: int
    command: str

    def cost(self, charge: Charge) -> float:
        return self.param_cost if charge == "param" else self.compute_cost


@dataclass(frozen=True)
class TaskCalibrations:
    train_set_size: int  # the whole training split: what a run without a sample cap trains on
    calibrations: tuple[Calibration, ...]


MAX_CAP_RATIO = 4.0
"""A calibration serves runs whose training-sample count is within this factor of the cap it was measured at."""

_COMMAND = "python benchmarks/calibrate_param_cost.py --task {task} --episodes 10 --max-epochs 25 " \
           "--max-train-samples {train} --max-val-samples {val}"

# 25-epoch episodes, seeds 7 + 1000·i (the seed rule of that time), CPU (torch 2.13), 2026-11-26. The training-FLOP
# ratios are counts (FlopMeter) of the static host in the same setting, whose every epoch costs the same.
CALIBRATIONS: MappingProxyType[str, TaskCalibrations] = MappingProxyType({
    "synthetic": TaskCalibrations(SYNTHETIC_SPLIT_SIZES["train"], (
        # width 1.0: 81.64 %, 1.5: 82.15 %, 2.0: 82.56 %; 95 % bootstrap CI of the λ_p slope [0.108, 0.543].
        Calibration(
            param_cost=0.324, compute_cost=0.353, max_train_samples=2048, max_val_samples=512, widths=(1.0, 1.5, 2.0),
            added_param_ratios=(0.0, 1.1723, 2.7934), added_flop_ratios=(0.0, 1.088, 2.568),
            mean_final_accuracy=(81.641, 82.148, 82.559), episodes=10,
            command=_COMMAND.format(task="synthetic", train=2048, val=512),
        ),
        # width 1.0: 37.08 %, 1.5: 43.65 %, 2.0: 48.23 %; 95 % bootstrap CI of the λ_p slope [2.719, 4.990].
        Calibration(
            param_cost=3.918, compute_cost=4.304, max_train_samples=192, max_val_samples=96, widths=(1.0, 1.5, 2.0),
            added_param_ratios=(0.0, 1.1723, 2.7934), added_flop_ratios=(0.0, 1.0804, 2.5477),
            mean_final_accuracy=(37.08, 43.65, 48.23), episodes=10,
            command=_COMMAND.format(task="synthetic", train=192, val=96),
        ),
    )),
    "fashion_mnist": TaskCalibrations(60000, (
        # Debian's dataset-fashion-mnist. width 1.0: 49.48 %, 1.5: 55.00 %, 2.0: 57.81 %; λ_p CI [2.009, 3.846].
        Calibration(
            param_cost=2.863, compute_cost=2.876, max_train_samples=192, max_val_samples=96, widths=(1.0, 1.5, 2.0),
            added_param_ratios=(0.0, 1.1877, 2.8345), added_flop_ratios=(0.0, 1.1831, 2.8216),
            mean_final_accuracy=(49.48, 55.00, 57.81), episodes=10,
            command=_COMMAND.format(task="fashion_mnist", train=192, val=96),
        ),
    )),
})


def _training_samples(costs: TaskCalibrations, max_train_samples: int | None) -> int:
    return costs.train_set_size if max_train_samples is None else min(max_train_samples, costs.train_set_size)


def measured_cost(charge: Charge, task: str, max_train_samples: int | None) -> float | None:
    """The charge's λ measured for `task` at the training-sample cap nearest (by ratio) to the run's training-set size
    (its cap, or the whole split without one); None when the task has no calibration within `MAX_CAP_RATIO` of it."""
    costs = CALIBRATIONS.get(task)
    if costs is None:
        return None
    samples = _training_samples(costs, max_train_samples)
    distance = {c: abs(math.log(c.max_train_samples / samples)) for c in costs.calibrations}
    nearest = min(distance, key=distance.__getitem__)
    return nearest.cost(charge) if distance[nearest] <= math.log(MAX_CAP_RATIO) else None


@overload
def charged_cost(charge: Charge, task: str, given: float | None, max_train_samples: int | None) -> float: ...


@overload
def charged_cost(charge: Charge, task: str, given: float | None, max_train_samples: int | None, *,
                 logged_only: bool) -> float | None: ...


def charged_cost(charge: Charge, task: str, given: float | None, max_train_samples: int | None, *,
                 logged_only: bool = False) -> float | None:
    """The λ a run's gap reward charges: the one `given`, else the task's measured nearest the run's sample cap, else
    none. A reward something learns from cannot do without one, so none is refused, naming how to give one; a reward
    that is only logged (`logged_only`: a heuristic, a comparison, a study's evaluation) leaves the charge out
    (None)."""
    cost = given if given is not None else measured_cost(charge, task, max_train_samples)
    if cost is None and not logged_only:
        raise missing_cost(charge, task, max_train_samples)
    return cost


def calibration_coverage(task: str, max_train_samples: int | None) -> str:
    """Which sample caps `task` has calibrations for, for the error of a run that has none near its own."""
    costs = CALIBRATIONS.get(task)
    if costs is None:
        return "none measured"
    caps = ", ".join(str(c.max_train_samples) for c in costs.calibrations)
    return f"measured at {caps} training samples, not near {max_train_samples or f'all {costs.train_set_size}'}"


def missing_cost(charge: Charge, task: str, max_train_samples: int | None) -> UserInputError:
    """The error of a run whose reward needs a charge's λ and has none, naming how each command takes one."""
    coverage = calibration_coverage(task, max_train_samples)
    if charge == "param":
        return UserInputError(f"Task '{task}' has no parameter cost for the gap reward at this size ({coverage}): "
                              f"measure one with benchmarks/calibrate_param_cost.py and pass it (--set param_cost=C "
                              f"for train ppo and study, --param-cost C for datagen) or choose another reward family")
    return UserInputError(f"Task '{task}' has no compute cost for the gap reward at this size ({coverage}): measure "
                          f"one (--set compute_cost='\"auto\"' for train ppo and study, or "
                          f"benchmarks/calibrate_param_cost.py) and pass it (--set compute_cost=C; --compute-cost C "
                          f"for compare and train heuristic), or charge parameters (charge 'param')")
