"""Measured parameter costs (λ_p of the `gap` reward): what widening the static host buys, per task.

λ_p is the slope of the static host's final validation accuracy against its added-parameter ratio, fitted over
widths 1.0, 1.5 and 2.0 on paired seeds, in pp per 100 % of added parameters. Charging seeds this much per
parameter makes a positive `gap` return mean that growing beat simply training a wider network. Each entry records
the command that measured it; tasks without an entry have no default (pass `--set param_cost=...`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["PARAM_COSTS", "ParamCostCalibration"]


@dataclass(frozen=True)
class ParamCostCalibration:
    param_cost: float
    widths: tuple[float, ...]
    added_param_ratios: tuple[float, ...]
    mean_final_accuracy: tuple[float, ...]
    episodes: int
    command: str


PARAM_COSTS: MappingProxyType[str, ParamCostCalibration] = MappingProxyType({})
