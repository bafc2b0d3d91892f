"""Measured parameter costs (λ_p of the `gap` reward): what widening the static host buys, per task and data size.

λ_p is the slope of the static host's final validation accuracy against its added-parameter ratio, fitted over
widths 1.0, 1.5 and 2.0 on paired seeds, in pp per 100 % of added parameters. Charging seeds this much per
parameter makes a positive `gap` return mean that growing beat simply training a wider network. What widening buys
depends on how much data the host sees (on 192 samples a wider host gains twelve times what it gains on 2,048), so a
task keeps one calibration per measured training-sample cap and a run uses the one nearest its own cap, if that is
within a factor of `MAX_CAP_RATIO` of it. Each entry records the command that measured it; a run far from every
measured cap, or on a task without one, has no default (measure one, then pass `--set param_cost=...`).

This module is λ_p's home: the type every config and flag validates it with, the "auto" request, the calibrations
and the lookup every command resolves a missing λ_p through. Measuring one needs episodes, so the method lives above
the env layer (`esper.evaluation.param_cost`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import Field, StrictFloat, ValidationError, WrapValidator

from esper.leyline.errors import UserInputError
from esper.runtime.synthetic import SYNTHETIC_SPLIT_SIZES

__all__ = [
    "AUTO_PARAM_COST",
    "MAX_CAP_RATIO",
    "MAX_PARAM_COST",
    "PARAM_COSTS",
    "ParamCost",
    "ParamCostCalibration",
    "ParamCostOrAuto",
    "TaskParamCosts",
    "calibration_coverage",
    "measured_param_cost",
    "missing_param_cost",
]

MAX_PARAM_COST = 1e6
ParamCost = Annotated[StrictFloat, Field(ge=0.0, le=MAX_PARAM_COST)]
"""λ_p as every config and flag takes it: a finite number of pp per 100 % of added parameters (a bool is refused)."""
AUTO_PARAM_COST = "auto"
"""The `param_cost` that asks a learning command to measure λ_p for its setting (or reuse that measurement)."""


def _cost_or_auto(value: Any, handler: Callable[[Any], Any]) -> Any:
    """One message for the two accepted forms instead of one per branch of the union."""
    try:
        return handler(value)
    except ValidationError:
        raise ValueError(f"must be a number in [0, {MAX_PARAM_COST:,.0f}] (pp per 100 % of added parameters) or "
                         f"'{AUTO_PARAM_COST}', got {json.dumps(value, default=str)}") from None


ParamCostOrAuto = Annotated[ParamCost | Literal["auto"], WrapValidator(_cost_or_auto)]
"""λ_p, or `AUTO_PARAM_COST`: what the learning commands' configs take."""


@dataclass(frozen=True)
class ParamCostCalibration:
    param_cost: float
    max_train_samples: int
    max_val_samples: int
    widths: tuple[float, ...]
    added_param_ratios: tuple[float, ...]
    mean_final_accuracy: tuple[float, ...]
    episodes: int
    command: str


@dataclass(frozen=True)
class TaskParamCosts:
    train_set_size: int  # the whole training split: what a run without a sample cap trains on
    calibrations: tuple[ParamCostCalibration, ...]


MAX_CAP_RATIO = 4.0
"""A calibration serves runs whose training-sample count is within this factor of the cap it was measured at."""

_COMMAND = "python benchmarks/calibrate_param_cost.py --task {task} --episodes 10 --max-epochs 25 " \
           "--max-train-samples {train} --max-val-samples {val}"

PARAM_COSTS: MappingProxyType[str, TaskParamCosts] = MappingProxyType({
    # 25-epoch episodes, seeds 7 + 1000·i (the seed rule of that time), CPU (torch 2.13), 2026-11-26.
    "synthetic": TaskParamCosts(SYNTHETIC_SPLIT_SIZES["train"], (
        # width 1.0: 81.64 %, 1.5: 82.15 %, 2.0: 82.56 %; 95 % bootstrap CI of the slope [0.108, 0.543].
        ParamCostCalibration(
            param_cost=0.324, max_train_samples=2048, max_val_samples=512, widths=(1.0, 1.5, 2.0),
            added_param_ratios=(0.0, 1.1723, 2.7934), mean_final_accuracy=(81.641, 82.148, 82.559), episodes=10,
            command=_COMMAND.format(task="synthetic", train=2048, val=512),
        ),
        # width 1.0: 37.08 %, 1.5: 43.65 %, 2.0: 48.23 %; 95 % bootstrap CI of the slope [2.719, 4.990].
        ParamCostCalibration(
            param_cost=3.918, max_train_samples=192, max_val_samples=96, widths=(1.0, 1.5, 2.0),
            added_param_ratios=(0.0, 1.1723, 2.7934), mean_final_accuracy=(37.08, 43.65, 48.23), episodes=10,
            command=_COMMAND.format(task="synthetic", train=192, val=96),
        ),
    )),
    "fashion_mnist": TaskParamCosts(60000, (
        # Debian's dataset-fashion-mnist. width 1.0: 49.48 %, 1.5: 55.00 %, 2.0: 57.81 %; CI [2.009, 3.846].
        ParamCostCalibration(
            param_cost=2.863, max_train_samples=192, max_val_samples=96, widths=(1.0, 1.5, 2.0),
            added_param_ratios=(0.0, 1.1877, 2.8345), mean_final_accuracy=(49.48, 55.00, 57.81), episodes=10,
            command=_COMMAND.format(task="fashion_mnist", train=192, val=96),
        ),
    )),
})


def _training_samples(costs: TaskParamCosts, max_train_samples: int | None) -> int:
    return costs.train_set_size if max_train_samples is None else min(max_train_samples, costs.train_set_size)


def measured_param_cost(task: str, max_train_samples: int | None) -> float | None:
    """λ_p measured for `task` at the training-sample cap nearest (by ratio) to the run's training-set size (its cap,
    or the whole split without one); None when the task has no calibration within `MAX_CAP_RATIO` of it."""
    costs = PARAM_COSTS.get(task)
    if costs is None:
        return None
    samples = _training_samples(costs, max_train_samples)
    distance = {c: abs(math.log(c.max_train_samples / samples)) for c in costs.calibrations}
    nearest = min(distance, key=distance.__getitem__)
    return nearest.param_cost if distance[nearest] <= math.log(MAX_CAP_RATIO) else None


def calibration_coverage(task: str, max_train_samples: int | None) -> str:
    """Which sample caps `task` has calibrations for, for the error of a run that has none near its own."""
    costs = PARAM_COSTS.get(task)
    if costs is None:
        return "none measured"
    caps = ", ".join(str(c.max_train_samples) for c in costs.calibrations)
    return f"measured at {caps} training samples, not near {max_train_samples or f'all {costs.train_set_size}'}"


def missing_param_cost(task: str, max_train_samples: int | None) -> UserInputError:
    """The error of a run whose reward needs λ_p and has none, naming how each command takes one."""
    return UserInputError(f"Task '{task}' has no parameter cost for the gap reward at this size "
                          f"({calibration_coverage(task, max_train_samples)}): measure one with "
                          f"benchmarks/calibrate_param_cost.py and pass it (--set param_cost=C for train ppo and "
                          f"study, --param-cost C for datagen) or choose another reward family")
