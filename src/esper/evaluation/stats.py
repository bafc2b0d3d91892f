"""Statistics for controller comparisons: means, bootstrap intervals of a mean, paired verdicts.

Every interval is the same seeded percentile bootstrap of a mean: over one controller's episodes it is the
uncertainty of that controller's mean; over the per-episode differences of two controllers it is the paired
interval of the mean difference (pairing removes the shared episode-to-episode variance, so it is the narrower,
decisive one).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import TypedDict

__all__ = ["BOOTSTRAP_RESAMPLES", "MeanCI", "MeanStd", "PairStats", "bootstrap_mean_ci", "compare_pair", "mean_ci",
           "mean_std"]

BOOTSTRAP_RESAMPLES = 1000


class MeanStd(TypedDict):
    """Mean and population standard deviation of a sample."""

    mean: float
    std: float


class MeanCI(MeanStd):
    """Mean, population standard deviation and the 95 % bootstrap interval [low, high] of the mean."""

    ci95: list[float]


class PairStats(TypedDict):
    """Controller a against reference b over paired episodes (Δ = a − b, in percentage points)."""

    wins: int
    losses: int
    ties: int
    mean_delta: float
    ci95: list[float]
    verdict: str


def mean_std(values: Sequence[float]) -> MeanStd:
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values) if len(values) > 1 else 0.0}


def bootstrap_mean_ci(values: Sequence[float], *, seed: int, resamples: int = BOOTSTRAP_RESAMPLES
                      ) -> tuple[float, float]:
    """95 % percentile interval of the mean of `values` (resampled with replacement, reproducible from `seed`)."""
    if not values:
        raise ValueError("bootstrap_mean_ci needs at least one value")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(resamples))
    return means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))]


def mean_ci(values: Sequence[float], *, seed: int) -> MeanCI:
    low, high = bootstrap_mean_ci(values, seed=seed)
    return {**mean_std(values), "ci95": [low, high]}


def compare_pair(a: Sequence[float], b: Sequence[float], *, tie_threshold: float, seed: int) -> PairStats:
    """Controller a against reference b on paired episodes: wins/losses/ties, mean Δ, paired 95 % CI and a verdict."""
    deltas = [x - y for x, y in zip(a, b, strict=True)]
    low, high = bootstrap_mean_ci(deltas, seed=seed)
    mean = statistics.fmean(deltas)
    verdict = "no significant difference"
    if mean > tie_threshold and low > 0:
        verdict = "better"
    elif mean < -tie_threshold and high < 0:
        verdict = "worse"
    return {
        "wins": sum(d > tie_threshold for d in deltas), "losses": sum(d < -tie_threshold for d in deltas),
        "ties": sum(abs(d) <= tie_threshold for d in deltas), "mean_delta": mean, "ci95": [low, high],
        "verdict": verdict,
    }
