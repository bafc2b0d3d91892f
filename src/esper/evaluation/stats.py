"""Paired statistics for controller comparisons: means, paired-bootstrap intervals and verdicts."""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import Any

__all__ = ["BOOTSTRAP_RESAMPLES", "compare_pair", "mean_std", "paired_bootstrap_ci"]

BOOTSTRAP_RESAMPLES = 1000


def mean_std(values: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values) if len(values) > 1 else 0.0}


def paired_bootstrap_ci(deltas: Sequence[float], *, seed: int, resamples: int = BOOTSTRAP_RESAMPLES
                        ) -> tuple[float, float]:
    """95 % percentile interval of the mean paired difference."""
    rng = random.Random(seed)
    n = len(deltas)
    means = sorted(statistics.fmean(rng.choices(deltas, k=n)) for _ in range(resamples))
    return means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))]


def compare_pair(a: Sequence[float], b: Sequence[float], *, tie_threshold: float, seed: int) -> dict[str, Any]:
    """Controller a against reference b on paired episodes: wins/losses/ties, mean Δ, 95 % CI and a verdict."""
    deltas = [x - y for x, y in zip(a, b, strict=True)]
    low, high = paired_bootstrap_ci(deltas, seed=seed)
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
