"""Statistics for controller comparisons: means, 95 % intervals of a mean, paired verdicts.

Every interval is the Student t-interval of a mean: over one controller's episodes it is the uncertainty of that
controller's mean; over the per-episode differences of two controllers it is the paired interval of the mean
difference (pairing removes the shared episode-to-episode variance, so it is the narrower, decisive one).

Why t and not a bootstrap: at the 10 paired seeds a study runs, a coverage simulation (20,000 experiments of 10
deltas; tests/unit/evaluation/test_stats_coverage.py) measured the t-interval at 95.1 % for normal deltas and 94.8 %
and 95.0 % for skewed, discrete deltas (one-image steps of a 96- or 256-image split, skewness −0.4), while the
percentile and BCa bootstraps covered only 89–90 % on the same data: resampling 10 values underestimates the spread.
The t-interval is also exact, needs no seed, and negates exactly when the pair is swapped. Its limit: under heavy
skew (skewness −1, one seed in five losing 15 pp) it covers 91 % at 10 seeds (the bootstraps 87–88 %).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from typing import TypedDict

from scipy import stats as scipy_stats

from esper.leyline.errors import UserInputError

__all__ = ["CONFIDENCE", "ROUNDING_PP", "MeanCI", "MeanStd", "PairStats", "compare_pair", "mean_ci", "mean_std",
           "one_sample_pp", "t_interval"]

CONFIDENCE = 0.95

ROUNDING_PP = 1e-9
"""Accuracies are percentages ≤ 100, so float rounding makes a one-sample difference (100·k/n − 100·(k−1)/n) miss
100/n by ~1e-14 pp; comparisons with the tie threshold allow this much so that such a difference is never a tie."""


class MeanStd(TypedDict):
    """Mean and population standard deviation of a sample."""

    mean: float
    std: float


class MeanCI(MeanStd):
    """Mean, population standard deviation and the 95 % t-interval [low, high] of the mean."""

    ci95: list[float]


class PairStats(TypedDict):
    """Controller a against reference b over paired episodes (Δ = a − b, in percentage points)."""

    wins: int
    losses: int
    ties: int
    mean_delta: float
    ci95: list[float]
    verdict: str


def one_sample_pp(n_samples: int) -> float:
    """One sample's worth of accuracy in pp on a split of `n_samples`: the natural tie threshold, since a difference
    strictly below it cannot be a real difference in correctly classified samples."""
    if n_samples < 1:
        raise ValueError(f"one_sample_pp needs a split of at least one sample (got {n_samples})")
    return 100.0 / n_samples


def mean_std(values: Sequence[float]) -> MeanStd:
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values) if len(values) > 1 else 0.0}


@functools.cache
def _t_quantile(dof: int) -> float:
    return float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, dof))


def t_interval(values: Sequence[float]) -> tuple[float, float]:
    """95 % Student t-interval of the mean of `values`.

    One value, or values that are all equal, give the point [mean, mean]: no spread can be estimated from them, and
    a point (never NaN or ±inf) keeps results.json plain JSON; `compare_pair` gives no verdict from one episode.
    """
    if not values:
        raise ValueError("t_interval needs at least one value")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean
    half = _t_quantile(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def mean_ci(values: Sequence[float]) -> MeanCI:
    low, high = t_interval(values)
    return {**mean_std(values), "ci95": [low, high]}


def compare_pair(a: Sequence[float], b: Sequence[float], *, tie_threshold: float) -> PairStats:
    """Controller a against reference b on paired episodes: wins/losses/ties, mean Δ, paired 95 % CI and a verdict.

    An episode is a tie when |Δ| is strictly below `tie_threshold` (pass `one_sample_pp(n)`: then one sample's
    difference counts). The verdict is "better"/"worse" only when the interval excludes 0, |mean Δ| is not a tie
    and there are at least two episodes. Swapping a and b negates Δ and its interval exactly (x − y = −(y − x) in
    floating point and the interval is symmetric about the mean), swaps wins and losses and mirrors the verdict.
    """
    if tie_threshold < 0:
        raise UserInputError(f"tie_threshold must be ≥ 0 (got {tie_threshold})")
    deltas = [x - y for x, y in zip(a, b, strict=True)]
    low, high = t_interval(deltas)
    mean = statistics.fmean(deltas)

    def beyond(d: float) -> bool:  # not a tie: at least the threshold, less float rounding, and not exactly zero
        return d != 0 and abs(d) >= tie_threshold - ROUNDING_PP

    verdict = "no significant difference"
    if len(deltas) > 1 and beyond(mean):
        if low > 0:
            verdict = "better"
        elif high < 0:
            verdict = "worse"
    wins = sum(d > 0 and beyond(d) for d in deltas)
    losses = sum(d < 0 and beyond(d) for d in deltas)
    return {"wins": wins, "losses": losses, "ties": len(deltas) - wins - losses, "mean_delta": mean,
            "ci95": [low, high], "verdict": verdict}
