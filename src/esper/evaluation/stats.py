"""Statistics, the one home of every interval esper reports: comparisons of controllers over paired seeds, their
aggregates over training runs, and the bootstrap intervals of offline evaluation and λ_p's calibration.

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

import torch
from scipy import stats as scipy_stats

from esper.leyline.errors import UserInputError

__all__ = ["CONFIDENCE", "ROUNDING_PP", "MeanCI", "MeanStd", "PairStats", "RunAggregate", "aggregate_runs",
           "bootstrap_counts", "compare_pair", "crossed_interval", "iqm", "mean_ci", "mean_std", "one_sample_pp",
           "percentile_interval", "t_interval", "within_group_slope"]

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


def within_group_slope(groups: Sequence[Sequence[tuple[float, float]]]) -> tuple[float, tuple[float, float]] | None:
    """The least-squares slope of y on x over (x, y) points with each group's own mean removed (a fixed effect per
    group: what is common to a group, such as its seed, cancels), and its 95 % t-interval. None where x never varies
    within a group, or too few points remain to estimate the noise."""
    xs: list[float] = []
    ys: list[float] = []
    for group in groups:
        mx, my = statistics.fmean(x for x, _ in group), statistics.fmean(y for _, y in group)
        xs += [x - mx for x, _ in group]
        ys += [y - my for _, y in group]
    sxx, dof = sum(x * x for x in xs), len(xs) - len(groups) - 1
    if sxx == 0.0 or dof < 1:
        return None
    slope = sum(x * y for x, y in zip(xs, ys, strict=True)) / sxx
    noise = sum((y - slope * x) ** 2 for x, y in zip(xs, ys, strict=True)) / dof
    half = _t_quantile(dof) * math.sqrt(noise / sxx)
    return slope, (slope - half, slope + half)


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


# ------------------------------------------------------------------------------------------ bootstrap


def bootstrap_counts(n_items: int, n_resamples: int, seed: int) -> torch.Tensor:
    """[1 + n_resamples, n_items] multiplicities: row 0 is the data itself, each other row a resample of the items
    with replacement. Used where the items are whole units (episodes, seeds) and a statistic is recomputed as a
    weighted sum, so every resample is one batched product."""
    g = torch.Generator().manual_seed(seed)
    draws = torch.randint(n_items, (n_resamples, n_items), generator=g)
    counts = torch.zeros(n_resamples, n_items, dtype=torch.float64).scatter_add_(
        1, draws, torch.ones(n_resamples, n_items, dtype=torch.float64))
    return torch.cat([torch.ones(1, n_items, dtype=torch.float64), counts])


def percentile_interval(replicates: torch.Tensor, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile interval of the finite bootstrap replicates (NaN, NaN when none is finite)."""
    finite = replicates[torch.isfinite(replicates)]
    if finite.numel() == 0:
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2.0
    low, high = torch.quantile(finite, torch.tensor([tail, 1.0 - tail], dtype=finite.dtype)).tolist()
    return low, high


# ------------------------------------------------------------------------------------------ over training runs


class RunAggregate(TypedDict):
    """Controller X against Y over K training runs × n paired seeds (Δ = X − Y in pp).

    `per_run` holds each run's mean Δ over the seeds; `mean` and `iqm` summarize them; `ci95` is the crossed
    interval of the mean Δ (runs and seeds both random); `prob_improvement` is P(X > Y) on a random run and seed;
    `better`/`worse` count the runs whose own paired interval over the seeds lies above/below 0."""

    runs: int
    seeds: int
    per_run: list[float]
    mean: float
    iqm: float
    ci95: list[float]
    prob_improvement: float
    better: int
    worse: int


def iqm(values: Sequence[float]) -> float:
    """Interquartile mean: the mean of the middle 50 % (25 % trimmed from each end; at 5 runs, the middle 3)."""
    if not values:
        raise ValueError("iqm needs at least one value")
    return float(scipy_stats.trim_mean(list(values), 0.25))


def crossed_interval(deltas: Sequence[Sequence[float]]) -> tuple[float, float]:
    """95 % interval of the mean of `deltas[run][seed]` when runs and seeds are both random and every run is scored
    on the same seeds (a crossed design: a seed that is easy is easy for every run).

    Var(grand mean) = σ²_run/K + σ²_seed/n + σ²_e/(Kn), estimated conservatively from the two-way ANOVA mean squares
    as (MS_run + MS_seed)/(Kn) (their expectation exceeds the truth by σ²_e/(Kn)), with Satterthwaite's degrees of
    freedom. A t-interval over run means alone misses the seeds' share (it covered 45 % when seeds dominate), and a
    two-level bootstrap resamples only 5 runs (83 % when runs dominate); this one covers 94–99 % in every case of
    tests/unit/evaluation/test_run_coverage.py at 5 runs × 20 seeds. With one run it is the paired t-interval over
    the seeds, and says nothing about another training run.
    """
    k, n = len(deltas), len(deltas[0]) if deltas else 0
    if k == 0 or n == 0 or any(len(row) != n for row in deltas):
        raise ValueError("crossed_interval needs a non-empty runs × seeds table")
    if k == 1:
        return t_interval(deltas[0])
    if n == 1:
        return t_interval([row[0] for row in deltas])
    grand = statistics.fmean(v for row in deltas for v in row)
    run_means = [statistics.fmean(row) for row in deltas]
    seed_means = [statistics.fmean(col) for col in zip(*deltas)]
    ms_run = n * sum((m - grand) ** 2 for m in run_means) / (k - 1)
    ms_seed = k * sum((m - grand) ** 2 for m in seed_means) / (n - 1)
    total = ms_run + ms_seed
    if total == 0.0:
        return grand, grand
    dof = total**2 / (ms_run**2 / (k - 1) + ms_seed**2 / (n - 1))
    half = float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, dof)) * math.sqrt(total / (k * n))
    return grand - half, grand + half


def _rows(scores: Sequence[Sequence[float]], runs: int, what: str) -> list[Sequence[float]]:
    """A reference's score rows, one per run: its own runs, or its one row (a controller without training runs)
    repeated."""
    if len(scores) == runs:
        return list(scores)
    if len(scores) == 1:
        return [scores[0]] * runs
    raise ValueError(f"{what} has {len(scores)} runs; expected {runs} or 1")


def aggregate_runs(x: Sequence[Sequence[float]], y: Sequence[Sequence[float]], *, tie_threshold: float
                   ) -> RunAggregate:
    """X against Y: `x[run][seed]` and `y[run][seed]` (or `y[0][seed]` for a reference without training runs, e.g.
    static), every run scored on the same seeds. Run r of X is paired with run r of Y (its own init or replay)."""
    if not x or not x[0]:
        raise ValueError("aggregate_runs needs at least one run and one seed")
    ys = _rows(y, len(x), "the reference")
    deltas = [[a - b for a, b in zip(xr, yr, strict=True)] for xr, yr in zip(x, ys, strict=True)]
    per_run = [statistics.fmean(row) for row in deltas]
    verdicts = [compare_pair(xr, yr, tie_threshold=tie_threshold)["verdict"] for xr, yr in zip(x, ys, strict=True)]
    wins = sum(d >= tie_threshold - ROUNDING_PP and d > 0 for row in deltas for d in row)
    ties = sum(abs(d) < tie_threshold - ROUNDING_PP or d == 0 for row in deltas for d in row)
    low, high = crossed_interval(deltas)
    return {"runs": len(x), "seeds": len(x[0]), "per_run": per_run, "mean": statistics.fmean(per_run),
            "iqm": iqm(per_run), "ci95": [low, high],
            "prob_improvement": (wins + 0.5 * ties) / sum(len(row) for row in deltas),
            "better": verdicts.count("better"), "worse": verdicts.count("worse")}
