"""PPO training anomalies, ratio-explosion diagnostics and per-layer gradient stats.

Everything here runs on the rare path (once per rollout batch, or only after an anomaly), but still moves data to the
host in a single transfer so an escalated run on a GPU is not throttled by per-value synchronizations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from esper.leyline.actions import BLEND_IDS, ActionSpace, LifecycleOp
from esper.leyline.constants import ANOMALY_RATIO_COLLAPSE, ANOMALY_RATIO_EXPLOSION, CANONICAL_SLOTS

__all__ = [
    "AnomalyDetector",
    "AnomalyReport",
    "RatioExplosionDiagnostic",
    "collect_per_layer_gradients",
]

ACTION_HEADS: tuple[str, ...] = ("op", "slot", "blueprint", "blend")
MAX_WORST = 10


def _json_float(x: float) -> float | str:
    """Finite floats pass through; NaN/inf become strings so strict JSON encoders accept them."""
    return x if math.isfinite(x) else str(x)


@dataclass(slots=True)
class AnomalyReport:
    has_anomaly: bool = False
    anomaly_types: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)

    def add(self, anomaly_type: str, detail: str) -> None:
        self.has_anomaly = True
        self.anomaly_types.append(anomaly_type)
        self.details[anomaly_type] = detail


class AnomalyDetector:
    """Flags PPO updates that went wrong. The EV bar rises with progress: early critics are expected to be poor."""

    def __init__(
        self, max_ratio_threshold: float = ANOMALY_RATIO_EXPLOSION, min_ratio_threshold: float = ANOMALY_RATIO_COLLAPSE
    ) -> None:
        if not 0.0 < min_ratio_threshold < 1.0 < max_ratio_threshold:
            raise ValueError(
                f"Need 0 < min_ratio_threshold < 1 < max_ratio_threshold, got {min_ratio_threshold}, "
                f"{max_ratio_threshold}"
            )
        self.max_ratio_threshold = max_ratio_threshold
        self.min_ratio_threshold = min_ratio_threshold

    @staticmethod
    def ev_threshold(current_episode: int, total_episodes: int) -> float:
        """Minimum acceptable explained variance at progress p = current_episode / total_episodes."""
        if total_episodes <= 0:
            raise ValueError(f"total_episodes must be > 0, got {total_episodes}")
        if current_episode < 0:
            raise ValueError(f"current_episode must be >= 0, got {current_episode}")
        p = current_episode / total_episodes
        if p < 0.10:
            return -0.5
        if p < 0.25:
            return -0.2
        if p < 0.75:
            return 0.0
        return 0.1

    def check_all(
        self,
        ratio_max: float,
        ratio_min: float,
        explained_variance: float,
        skipped_update: bool,
        current_episode: int,
        total_episodes: int,
    ) -> AnomalyReport:
        """Non-finite metrics, and an update the learner skipped for non-finite losses, count as numerical
        instability (NaN never compares as out of range)."""
        threshold = self.ev_threshold(current_episode, total_episodes)
        report = AnomalyReport()
        if ratio_max > self.max_ratio_threshold:
            report.add("ratio_explosion", f"ratio_max={ratio_max:.4g} > {self.max_ratio_threshold}")
        if ratio_min < self.min_ratio_threshold:
            report.add("ratio_collapse", f"ratio_min={ratio_min:.4g} < {self.min_ratio_threshold}")
        if explained_variance < threshold:
            report.add(
                "value_collapse",
                f"explained_variance={explained_variance:.4g} < {threshold} "
                f"(episode {current_episode}/{total_episodes})",
            )
        non_finite = [
            name
            for name, value in (
                ("ratio_max", ratio_max),
                ("ratio_min", ratio_min),
                ("explained_variance", explained_variance),
            )
            if not math.isfinite(value)
        ]
        if skipped_update or non_finite:
            report.add("numerical_instability", f"skipped_update={skipped_update} non_finite_metrics={non_finite}")
        return report


def _action_names(indices: list[int], space: ActionSpace) -> dict[str, str]:
    op, slot, blueprint, blend = indices
    return {
        "op": LifecycleOp(op).name,
        "slot": CANONICAL_SLOTS[slot],
        "blueprint": space.blueprint_id(blueprint),
        "blend": BLEND_IDS[blend],
    }


@dataclass(frozen=True, slots=True)
class RatioExplosionDiagnostic:
    """Which transitions drove a ratio explosion/collapse, so a run log says what the policy did, not only that."""

    n_exploded: int
    n_collapsed: int
    worst_indices: tuple[int, ...]
    worst_ratios: tuple[float, ...]
    worst_actions: tuple[dict[str, str], ...]
    logp_diff_mean: float
    logp_diff_max: float

    @classmethod
    def from_batch(
        cls,
        ratio: torch.Tensor,
        old_log_probs: torch.Tensor,
        new_log_probs: torch.Tensor,
        actions: dict[str, torch.Tensor],
        max_ratio: float = ANOMALY_RATIO_EXPLOSION,
        min_ratio: float = ANOMALY_RATIO_COLLAPSE,
        *,
        space: ActionSpace,
    ) -> RatioExplosionDiagnostic:
        """`ratio`, log-probs and each `actions[head]` (op/slot/blueprint/blend) are aligned 1-D batches.

        `worst_*` list the out-of-range (or non-finite) ratios only, most extreme |log ratio| first.
        `logp_diff_*` are over new − old log-probs (max of the absolute difference). One host transfer.
        """
        missing = [h for h in ACTION_HEADS if h not in actions]
        if missing:
            raise ValueError(f"actions lacks heads {missing}")
        r = ratio.detach().flatten().double()
        if r.numel() == 0:
            return cls(0, 0, (), (), (), 0.0, 0.0)
        diff = (new_log_probs.detach().flatten() - old_log_probs.detach().flatten()).double()
        flagged = (r > max_ratio) | (r < min_ratio) | ~torch.isfinite(r)
        # Unflagged entries rank below every flagged one (|log r| >= 0), so top-k never displaces a flagged ratio.
        severity = torch.where(flagged, torch.nan_to_num(r.log().abs(), nan=math.inf), -1.0)
        worst = torch.topk(severity, min(MAX_WORST, r.numel())).indices
        summary = torch.stack(
            [(r > max_ratio).sum().double(), (r < min_ratio).sum().double(), diff.mean(), diff.abs().max()]
        )
        heads = [actions[h].detach().flatten().to(r.device)[worst].double() for h in ACTION_HEADS]
        rows = torch.stack([worst.double(), flagged[worst].double(), r[worst], *heads], dim=1)
        host = torch.cat([summary, rows.flatten()]).tolist()
        width = rows.shape[1]
        picked = [host[i : i + width] for i in range(4, len(host), width)]
        picked = [row for row in picked if row[1]]
        return cls(
            n_exploded=int(host[0]),
            n_collapsed=int(host[1]),
            worst_indices=tuple(int(row[0]) for row in picked),
            worst_ratios=tuple(row[2] for row in picked),
            worst_actions=tuple(_action_names([int(v) for v in row[3:]], space) for row in picked),
            logp_diff_mean=host[2],
            logp_diff_max=host[3],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_exploded": self.n_exploded,
            "n_collapsed": self.n_collapsed,
            "worst_indices": list(self.worst_indices),
            "worst_ratios": [_json_float(x) for x in self.worst_ratios],
            "worst_actions": [dict(a) for a in self.worst_actions],
            "logp_diff_mean": _json_float(self.logp_diff_mean),
            "logp_diff_max": _json_float(self.logp_diff_max),
        }


LAYER_STAT_NAMES: tuple[str, ...] = (
    "norm",
    "mean",
    "std",
    "min",
    "max",
    "zero_fraction",
    "small_fraction",
    "large_fraction",
    "nan_count",
    "inf_count",
)


def _layer_stats(grad: torch.Tensor) -> torch.Tensor:
    """Stats of one gradient as a device vector; moments over the finite entries so NaN/inf show only as counts."""
    g = grad.detach().flatten().double()
    finite = torch.isfinite(g)
    n_finite = finite.sum()
    gf = torch.where(finite, g, torch.zeros_like(g))
    mean = gf.sum() / n_finite.clamp(min=1)
    var = (torch.where(finite, g - mean, torch.zeros_like(g)) ** 2).sum() / n_finite.clamp(min=1)
    has_finite = n_finite > 0
    zero = torch.zeros((), dtype=g.dtype, device=g.device)
    lo = torch.where(has_finite, torch.where(finite, g, math.inf).min(), zero)
    hi = torch.where(has_finite, torch.where(finite, g, -math.inf).max(), zero)
    a = g.abs()
    numel = g.numel()
    return torch.stack(
        [
            torch.linalg.vector_norm(gf),
            mean,
            var.sqrt(),
            lo,
            hi,
            (g == 0).sum() / numel,
            (a < 1e-6).sum() / numel,
            (a > 10.0).sum() / numel,
            torch.isnan(g).sum().double(),
            torch.isinf(g).sum().double(),
        ]
    )


def collect_per_layer_gradients(module: nn.Module, max_layers: int = 8) -> dict[str, dict[str, float | int]]:
    """Per-parameter gradient stats for the first `max_layers` parameters that have a gradient (GRADIENT_STATS).

    JSON-safe: moments skip non-finite entries, which are reported as `nan_count`/`inf_count` instead.
    """
    if max_layers <= 0:
        raise ValueError(f"max_layers must be > 0, got {max_layers}")
    named = [(name, p) for name, p in module.named_parameters() if p.grad is not None][:max_layers]
    if not named:
        return {}
    rows = torch.stack([_layer_stats(p.grad) for _, p in named if p.grad is not None]).cpu().tolist()
    result: dict[str, dict[str, float | int]] = {}
    for (name, p), row in zip(named, rows):
        stats: dict[str, float | int] = {"numel": p.numel()}
        stats.update(zip(LAYER_STAT_NAMES, row))
        stats["nan_count"] = int(stats["nan_count"])
        stats["inf_count"] = int(stats["inf_count"])
        result[name] = stats
    return result
