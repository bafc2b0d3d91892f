"""The objective a controller learns from the `gap` reward, as evaluation scores it: per paired seed, its accuracy
minus the static host's, minus the charge for what it added beyond the static host.

Charge "compute": − λ_c·(F / F_static − 1), F an episode's training FLOPs (everything the env's FlopMeter counts);
charge "param": − λ_p·(P / P_static − 1), P the final parameter count (host and seeds), which for a controller
growing the static host is its seed parameters per host parameter. These are the gap reward's undiscounted return
(γ = 1) with the static twin's final validation accuracy read from the paired static episode, which is the twin bit
for bit, and scored on `split`. With the measured λ_c it is the controller's accuracy above the static frontier,
linearized at width 1, at equal training compute.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import TypedDict

from esper.env import EpisodeResult
from esper.env.charges import CHARGES
from esper.evaluation.results import ComparisonResult
from esper.evaluation.stats import t_interval

__all__ = ["ChargedGap", "charged_gaps", "objective_scorer"]

STATIC = "static"


class ChargedGap(TypedDict):
    """A controller's charged gap to static (pp; per paired seed, then the mean and its 95 % t-interval)."""

    charge: str
    cost: float
    mean_delta: float
    ci95: list[float]
    per_seed: list[float]


def _added(episode: EpisodeResult, static: EpisodeResult, charge: str) -> float:
    """What `episode` spent beyond its paired static episode, as a share of the static one's."""
    if charge == "compute":
        return episode.train_flops / static.train_flops - 1.0
    return (episode.host_params + episode.params_added) / (static.host_params + static.params_added) - 1.0


def charged_gaps(result: ComparisonResult, charge: str, cost: float, split: str = "test") -> dict[str, ChargedGap]:
    """For every controller but "static": accuracy on `split` ("test", or "val": final validation accuracy, for
    choices that must not see the test split) minus the paired static episode's, minus `cost` (λ of `charge`) times
    the share of parameters or training compute it added. A controller without a score on `split` is left out."""
    if charge not in CHARGES:
        raise ValueError(f"charge must be one of {sorted(CHARGES)}, got {charge!r}")
    if not (math.isfinite(cost) and cost >= 0.0):
        raise ValueError(f"cost must be a finite λ >= 0 (pp per 100 %), got {cost}")
    if split not in ("test", "val"):
        raise ValueError(f"split must be 'test' or 'val', got {split!r}")
    if STATIC not in result.controllers:
        raise ValueError(f"the charged gap is relative to the '{STATIC}' controller, which is not among "
                         f"{result.controllers}")

    def accuracy(e: EpisodeResult) -> float | None:
        return e.final_test_accuracy if split == "test" else e.final_accuracy

    statics = {e.episode: e for e in result.episodes if e.controller == STATIC}
    out: dict[str, ChargedGap] = {}
    for label in result.controllers:
        episodes = sorted((e for e in result.episodes if e.controller == label), key=lambda e: e.episode)
        if label == STATIC or not episodes:
            continue
        unpaired = sorted(e.episode for e in episodes if e.episode not in statics)
        if unpaired:
            raise ValueError(f"{label}'s episodes {unpaired} have no paired {STATIC} episode")
        per_seed = []
        for e in episodes:
            mine, base = accuracy(e), accuracy(statics[e.episode])
            if mine is None or base is None:
                break
            per_seed.append(mine - base - cost * _added(e, statics[e.episode], charge))
        else:
            out[label] = {"charge": charge, "cost": cost, "mean_delta": statistics.fmean(per_seed),
                          "ci95": list(t_interval(per_seed)), "per_seed": per_seed}
    return out


def objective_scorer(result: ComparisonResult, charge: str, cost: float) -> Callable[[ComparisonResult, str],
                                                                            list[float]]:
    """A scorer of `result`'s controllers by their charged gap on the test split per paired seed (static's is 0):
    the score a learned controller is reported on, the objective its reward's return measures."""
    gaps = charged_gaps(result, charge, cost)
    statics = sum(e.controller == STATIC for e in result.episodes)

    def score(scored: ComparisonResult, label: str) -> list[float]:
        if scored is not result:
            raise ValueError("this scorer scores the comparison it was made for")
        return [0.0] * statics if label == STATIC else gaps[label]["per_seed"]

    return score
