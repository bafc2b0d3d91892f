"""Whether a study's verdicts are about growth: the static host's convergence, capacity headroom, and the static
frontier that accuracy must beat at equal training compute or parameters.

A host still climbing at its last epoch makes every verdict a statement about how fast the first steps go: an
architecture that trains faster wins, whether or not it ends better. So a study measures the static host's
convergence (the least-squares slope of its mean validation accuracy over the last 20 % of the epochs) and says
"converged" only when that slope is at most 0.1 pp per epoch. Growth can only add what capacity or architecture can
add, so it also reports the headroom: static at twice the width, and best-fixed, against static. And since a grown
network costs compute and parameters, each controller's accuracy is set against the static host at widths 0.5–2
read at its own training GFLOPs and parameter count (the static frontier).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import TypedDict

import numpy as np

from esper.env import EpisodeResult
from esper.evaluation.results import ComparisonResult
from esper.evaluation.stats import t_interval

__all__ = ["FRONTIER_WIDTHS", "SLOPE_THRESHOLD", "Convergence", "FrontierGap", "Headroom", "convergence",
           "frontier_gaps", "headroom", "static_width_labels"]

SLOPE_THRESHOLD = 0.1
"""pp per epoch: the most the static host's mean validation accuracy may still rise at the end of a converged run."""
TAIL_SHARE = 0.2
FRONTIER_WIDTHS = (0.5, 1.0, 1.5, 2.0)
HEADROOM_PP = 1.0
"""Below this much headroom from both width and best-fixed, growth has nothing to add: not a reference setting."""


def static_width_labels(widths: Sequence[float] = FRONTIER_WIDTHS) -> list[str]:
    """Controller labels of the static host at `widths` (`static` for width 1)."""
    return ["static" if w == 1.0 else f"static:{w:g}" for w in widths]


class Convergence(TypedDict):
    """The static host's mean validation accuracy over the last `epochs` (1-based), its slope and the verdict."""

    controller: str
    seeds: int
    epochs: list[int]
    slope_pp_per_epoch: float
    threshold: float
    converged: bool
    final_val_accuracy: float


def convergence(episodes: Sequence[EpisodeResult], controller: str = "static") -> Convergence:
    """The convergence criterion, computed from `controller`'s accuracy curves (validation, one point per epoch)."""
    curves = [e.accuracy_curve for e in episodes if e.controller == controller]
    if not curves:
        raise ValueError(f"no episodes of {controller!r} to measure convergence on")
    length = min(len(c) for c in curves)
    mean = [statistics.fmean(c[t] for c in curves) for t in range(length)]
    tail = max(2, math.ceil(TAIL_SHARE * length))
    epochs = list(range(length - tail + 1, length + 1))
    slope = float(np.polyfit(epochs, mean[-tail:], 1)[0])
    return {"controller": controller, "seeds": len(curves), "epochs": epochs, "slope_pp_per_epoch": slope,
            "threshold": SLOPE_THRESHOLD, "converged": slope <= SLOPE_THRESHOLD, "final_val_accuracy": mean[-1]}


class Headroom(TypedDict):
    """Test Δ (pp) of `controller` against static, with its paired 95 % interval."""

    controller: str
    mean_delta: float
    ci95: list[float]


def headroom(result: ComparisonResult, wider: str = "static:2", fixed: str = "best-fixed"
             ) -> dict[str, Headroom]:
    """Capacity headroom at the end of the episodes: static at twice the width, and best-fixed, against static (the
    ones present)."""
    out: dict[str, Headroom] = {}
    for label in (wider, fixed):
        if label in result.controllers and "static" in result.controllers:
            pair = result.pairwise[label]["static"]
            out[label] = {"controller": label, "mean_delta": pair["mean_delta"], "ci95": list(pair["ci95"])}
    return out


def has_headroom(room: Mapping[str, Headroom]) -> bool:
    """Whether width or best-fixed gains more than `HEADROOM_PP` over static."""
    return any(h["mean_delta"] > HEADROOM_PP for h in room.values())


class FrontierGap(TypedDict):
    """A controller's test accuracy minus the static frontier's at its own cost (per-seed, then mean and interval);
    None where its cost lies outside the frontier's range of widths."""

    axis: str
    mean_delta: float | None
    ci95: list[float] | None
    per_seed: list[float | None]


def _axis_value(axis: str) -> Callable[[EpisodeResult], float]:
    if axis == "gflops":
        return lambda e: e.train_flops / 1e9
    return lambda e: float(e.host_params + e.params_added)


def _accuracy(split: str) -> Callable[[EpisodeResult], float | None]:
    if split == "test":
        return lambda e: e.final_test_accuracy
    return lambda e: e.final_accuracy


def frontier_gaps(result: ComparisonResult, axis: str, widths: Sequence[float] = FRONTIER_WIDTHS, *,
                  split: str = "test") -> dict[str, FrontierGap]:
    """For every controller other than the static widths: test accuracy (final validation accuracy with `split`
    "val", for choices that must not see the test split) minus the accuracy of the static host interpolated
    (piecewise linearly, per paired seed) at the controller's training GFLOPs (`axis` "gflops") or final parameter
    count ("params"). Positive: better than widening the static host at the same cost."""
    statics = static_width_labels(widths)
    if not set(statics) <= set(result.controllers):
        return {}
    by = {c: sorted((e for e in result.episodes if e.controller == c), key=lambda e: e.episode)
          for c in result.controllers}
    value, accuracy = _axis_value(axis), _accuracy(split)
    out: dict[str, FrontierGap] = {}
    for label in result.controllers:
        if label in statics or any(accuracy(e) is None for e in by[label]):
            continue
        per_seed: list[float | None] = []
        for i, episode in enumerate(by[label]):
            points = sorted((value(by[s][i]), accuracy(by[s][i]) or 0.0) for s in statics)
            x = value(episode)
            if not points[0][0] <= x <= points[-1][0]:
                per_seed.append(None)
                continue
            reached = float(np.interp(x, [p[0] for p in points], [p[1] for p in points]))
            per_seed.append((accuracy(episode) or 0.0) - reached)
        known = [d for d in per_seed if d is not None]
        full = len(known) == len(per_seed)
        out[label] = {"axis": axis, "mean_delta": statistics.fmean(known) if full else None,
                      "ci95": list(t_interval(known)) if full else None, "per_seed": per_seed}
    return out
