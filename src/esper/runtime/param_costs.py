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


PARAM_COSTS: MappingProxyType[str, ParamCostCalibration] = MappingProxyType({
    # 25-epoch episodes, 2048 training / 512 validation samples, seeds 7 + 1000·i, CPU (torch 2.13), 2026-11-26:
    # width 1.0: 81.64 %, 1.5: 82.15 %, 2.0: 82.56 %;
    # slope 0.324 pp per 100 %, 95 % bootstrap CI [0.108, 0.543].
    "synthetic": ParamCostCalibration(
        param_cost=0.324, widths=(1.0, 1.5, 2.0),
        added_param_ratios=(0.0, 1.1723, 2.7934),
        mean_final_accuracy=(81.641, 82.148, 82.559), episodes=10,
        command="python benchmarks/calibrate_param_cost.py --task synthetic --episodes 10 --max-epochs 25 "
                "--max-train-samples 2048 --max-val-samples 512",
    ),
})
