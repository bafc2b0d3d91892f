"""The interval over training runs covers the true mean difference ≥ 93 % at 5 runs × 20 paired seeds.

Δ[run][seed] = μ + a_run + b_seed + e: runs differ (a policy learns in some training runs and not in others), seeds
differ for every run alike (an easy seed is easy for all), and each score is a count of correct test images. The
crossed interval must cover μ in every case; the two shortcuts it replaces must visibly fail somewhere, so this test
would notice if the crossed interval degenerated into either of them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats as scipy_stats

from esper.evaluation.stats import aggregate_runs, crossed_interval, iqm

RUNS, SEEDS, EXPERIMENTS = 5, 20, 1000

Sampler = Callable[[np.random.Generator], np.ndarray]


def normal(run_sd: float, seed_sd: float, noise_sd: float) -> Sampler:
    def sample(rng: np.random.Generator) -> np.ndarray:
        return (1.0 + rng.normal(0, run_sd, (RUNS, 1)) + rng.normal(0, seed_sd, (1, SEEDS))
                + rng.normal(0, noise_sd, (RUNS, SEEDS)))
    return sample


def learns_in_some_runs(rng: np.random.Generator) -> np.ndarray:
    """Each run learns (+3 pp) with probability 0.6, else gains nothing; scored on 2,000 test images."""
    learned = rng.random((RUNS, 1)) < 0.6
    p = rng.uniform(0.7, 0.85, (1, SEEDS))  # the seed's difficulty, shared by every run and the reference
    reference = rng.binomial(2000, np.broadcast_to(p, (RUNS, SEEDS)))
    policy = rng.binomial(2000, np.clip(p + np.where(learned, 0.03, 0.0), 0, 1))
    return 100.0 * (policy - reference) / 2000 - (100.0 * 0.6 * 0.03 - 1.0)  # recentred: true mean 1.0


CASES: dict[str, Sampler] = {
    "balanced": normal(1.0, 1.0, 1.0),
    "runs dominate": normal(3.0, 0.5, 1.0),
    "seeds dominate": normal(0.3, 3.0, 1.0),
    "noise only": normal(0.0, 0.0, 1.0),
    "learns in 3 of 5 runs": learns_in_some_runs,
}


def cluster_t(deltas: np.ndarray) -> tuple[float, float]:
    means = deltas.mean(1)
    half = scipy_stats.t.ppf(0.975, len(means) - 1) * means.std(ddof=1) / np.sqrt(len(means))
    return means.mean() - half, means.mean() + half


def coverage(sample: Sampler, interval: Callable[[np.ndarray], tuple[float, float]], seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(EXPERIMENTS):
        low, high = interval(sample(rng))
        hits += low <= 1.0 <= high
    return hits / EXPERIMENTS


ALL_RUNS_ALIKE = 0.6**RUNS + 0.4**RUNS
"""In "learns in 3 of 5 runs", the chance that all 5 runs learned or none did: the runs then show no spread, and no
interval computed from them can cover the mean over runs. 1 − this (91.2 %) bounds every method's coverage there."""


@pytest.mark.parametrize("case", list(CASES))
def test_crossed_interval_covers_the_mean_over_runs_and_seeds(case: str) -> None:
    covered = coverage(CASES[case], lambda d: crossed_interval(d.tolist()), seed=7)
    if case == "learns in 3 of 5 runs":
        assert covered >= 1 - ALL_RUNS_ALIKE - 0.03, covered  # at its bound, within simulation error
    else:
        assert covered >= 0.93, covered


def test_an_interval_over_run_means_alone_misses_the_seeds_share() -> None:
    assert coverage(CASES["seeds dominate"], cluster_t, seed=7) < 0.8


def test_iqm_is_the_mean_of_the_middle_runs() -> None:
    assert iqm([0.0, 1.0, 2.0, 3.0, 100.0]) == pytest.approx(2.0)  # 5 runs: the middle 3


def test_one_run_is_the_paired_t_interval_over_seeds() -> None:
    row = [1.0, 2.5, -0.5, 3.0]
    low, high = crossed_interval([row])
    half = scipy_stats.t.ppf(0.975, 3) * np.std(row, ddof=1) / 2
    assert (low, high) == pytest.approx((np.mean(row) - half, np.mean(row) + half))


def test_aggregate_counts_runs_and_probability_of_improvement() -> None:
    static = [[70.0, 71.0, 72.0, 73.0]]
    policy = [[72.0, 73.0, 74.0, 75.0], [70.0, 71.0, 72.0, 73.0], [69.0, 70.5, 71.0, 72.0]]
    agg = aggregate_runs(policy, static, tie_threshold=0.05)
    assert agg["per_run"] == pytest.approx([2.0, 0.0, -0.875])
    assert agg["mean"] == pytest.approx(sum(agg["per_run"]) / 3)
    assert agg["iqm"] == pytest.approx(agg["mean"])  # 3 runs: 25 % of 3 trims nothing
    assert (agg["better"], agg["worse"]) == (1, 1)
    assert agg["prob_improvement"] == pytest.approx((4 + 0.5 * 4) / 12)
    low, high = agg["ci95"]
    assert low < agg["mean"] < high
    paired = aggregate_runs(policy, policy, tie_threshold=0.05)  # run r against its own run r: all ties
    assert paired["prob_improvement"] == 0.5 and paired["ci95"] == [0.0, 0.0]


def two_level_bootstrap(deltas: np.ndarray, resamples: int = 400) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    runs, seeds = deltas.shape
    means = [deltas[np.ix_(rng.integers(0, runs, runs), rng.integers(0, seeds, seeds))].mean()
             for _ in range(resamples)]
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


if __name__ == "__main__":  # the coverage table: python tests/unit/evaluation/test_run_coverage.py
    methods: dict[str, Callable[[np.ndarray], tuple[float, float]]] = {
        "crossed (esper)": lambda d: crossed_interval(d.tolist()), "t over run means": cluster_t,
        "two-level bootstrap": two_level_bootstrap}
    print(f"| case ({RUNS} runs × {SEEDS} seeds, {EXPERIMENTS} experiments) | " + " | ".join(methods) + " |")
    print("|---|" + "---|" * len(methods))
    for name, sampler in CASES.items():
        print(f"| {name} | " + " | ".join(f"{100 * coverage(sampler, m, seed=7):.1f} %" for m in methods.values())
              + " |")
