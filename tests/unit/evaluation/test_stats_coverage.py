"""The paired interval covers the true mean difference ≥ 93 % of the time at the 10 seeds a study runs.

Each case simulates many experiments of 10 paired deltas with a known mean and counts how often the 95 % interval
contains it: (a) normal deltas, (b) skewed, discrete deltas: differences of correctly classified images out of a
96- or 256-image split, where one episode in five (or ten) of controller a falls behind (a mixture of binomials).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats as scipy_stats

from esper.evaluation.stats import t_interval

SEEDS, EXPERIMENTS = 10, 2000

Sampler = Callable[[np.random.Generator, int], tuple[np.ndarray, float]]


def normal(rng: np.random.Generator, experiments: int) -> tuple[np.ndarray, float]:
    return rng.normal(1.0, 2.0, (experiments, SEEDS)), 1.0


def image_counts(n_images: int, behind: float, drop: float) -> Sampler:
    """Δ in pp between two controllers scored on `n_images`: accuracy varies by seed (shared by the pair); a gains
    3 pp, except that with probability `behind` it loses `drop` instead."""
    def sample(rng: np.random.Generator, experiments: int) -> tuple[np.ndarray, float]:
        p = rng.uniform(0.6, 0.8, (experiments, SEEDS))
        b = rng.binomial(n_images, p)
        a = np.where(rng.random(p.shape) < behind, rng.binomial(n_images, p - drop),
                     rng.binomial(n_images, p + 0.03))
        return 100.0 * (a - b) / n_images, 100.0 * ((1 - behind) * 0.03 - behind * drop)
    return sample


CASES = {"normal": normal, "96 images": image_counts(96, 0.2, 0.10), "256 images": image_counts(256, 0.1, 0.05)}


def coverage(sample: Sampler, seed: int, experiments: int = EXPERIMENTS) -> tuple[float, float]:
    """(share of experiments whose interval contains the true mean, skewness of the pooled deltas)."""
    deltas, truth = sample(np.random.default_rng(seed), experiments)
    hits = 0
    for row in deltas.tolist():
        low, high = t_interval(row)
        hits += low <= truth <= high
    return hits / experiments, float(scipy_stats.skew(deltas.ravel()))


@pytest.mark.parametrize("case", list(CASES))
def test_paired_interval_covers_the_true_mean_difference(case: str) -> None:
    covered, skew = coverage(CASES[case], seed=2024)
    assert 0.93 <= covered <= 0.975, covered  # honest, and not so wide that it says nothing
    if case != "normal":
        assert skew < -0.3, skew  # the discrete cases really are skewed
