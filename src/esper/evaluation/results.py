"""Comparison results: per-controller summaries and paired statistics; `results.json` written and read back."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict, get_type_hints, is_typeddict

from esper.env import EpisodeResult
from esper.evaluation.stats import MeanCI, MeanStd, PairStats, compare_pair, mean_ci, mean_std
from esper.leyline import LifecycleOp
from esper.leyline.seeding import derive_seed
from esper.runtime.rows import LogFormatError, row_fields

__all__ = ["ComparisonResult", "ControllerStats"]


class ControllerStats(TypedDict):
    """One controller's summary over its episodes (results.json "per_controller")."""

    episodes: int
    final_accuracy: MeanCI
    best_accuracy: MeanStd
    params_added: MeanStd
    total_params: MeanStd
    seeds_created: float
    seeds_fossilized: float
    seeds_culled: float
    total_reward: MeanStd
    action_mix: dict[str, float]
    accuracy_curve_mean: list[float]


@dataclass
class ComparisonResult:
    """Per-controller summaries and pairwise paired statistics; `to_dict` is results.json, `from_dict` reads it."""

    FILE: ClassVar[str] = "results.json"

    controllers: list[str]
    episodes: list[EpisodeResult]
    tie_threshold: float
    seed: int
    per_controller: dict[str, ControllerStats] = field(default_factory=dict)
    pairwise: dict[str, dict[str, PairStats]] = field(default_factory=dict)
    matched: dict[str, Any] = field(default_factory=dict)  # how static:matched was widened, when it ran

    @classmethod
    def from_episodes(cls, controllers: list[str], episodes: list[EpisodeResult], *, tie_threshold: float,
                      seed: int) -> ComparisonResult:
        result = cls(controllers, episodes, tie_threshold, seed)
        by = {c: sorted((e for e in episodes if e.controller == c), key=lambda e: e.episode) for c in controllers}
        for i, (c, eps) in enumerate(by.items()):
            actions = {op.name: statistics.fmean(e.action_counts[op.name] / max(1, sum(e.action_counts.values()))
                                                 for e in eps) for op in LifecycleOp}
            result.per_controller[c] = {
                "episodes": len(eps),
                "final_accuracy": mean_ci([e.final_accuracy for e in eps], seed=derive_seed(seed, "final_accuracy", i)),
                "best_accuracy": mean_std([e.best_accuracy for e in eps]),
                "params_added": mean_std([float(e.params_added) for e in eps]),
                "total_params": mean_std([float(e.host_params + e.params_added) for e in eps]),
                "seeds_created": statistics.fmean(e.seeds_created for e in eps),
                "seeds_fossilized": statistics.fmean(e.seeds_fossilized for e in eps),
                "seeds_culled": statistics.fmean(e.seeds_culled for e in eps),
                "total_reward": mean_std([e.total_reward for e in eps]),
                "action_mix": actions,
                "accuracy_curve_mean": [statistics.fmean(vals) for vals in zip(*(e.accuracy_curve for e in eps))],
            }
        for i, a in enumerate(controllers):
            result.pairwise[a] = {}
            for j, b in enumerate(controllers):
                if a != b:
                    result.pairwise[a][b] = compare_pair(
                        [e.final_accuracy for e in by[a]], [e.final_accuracy for e in by[b]],
                        tie_threshold=tie_threshold, seed=derive_seed(seed, i, j))
        return result

    @property
    def reference(self) -> str:
        return self.controllers[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference, "controllers": self.controllers, "tie_threshold": self.tie_threshold,
            "seed": self.seed, "per_controller": self.per_controller, "pairwise": self.pairwise,
            "matched": self.matched, "episodes": [e.to_dict() for e in self.episodes],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = FILE) -> ComparisonResult:
        """Read back `to_dict()` output; a different schema is a LogFormatError naming `source` and the key."""
        _check_keys(data, {"reference", "controllers", "tie_threshold", "seed", "per_controller", "pairwise",
                           "matched", "episodes"}, source)
        if not isinstance(data["controllers"], list) or not isinstance(data["episodes"], list):
            raise LogFormatError(f"{source}: 'controllers' and 'episodes' must be lists")
        controllers = [str(c) for c in data["controllers"]]
        if not controllers or data["reference"] != controllers[0]:
            raise LogFormatError(f"{source}: 'reference' must be the first of 'controllers' (got "
                                 f"{data['reference']!r} and {controllers})")
        _check_keys(data["per_controller"], set(controllers), f"{source} per_controller")
        _check_keys(data["pairwise"], set(controllers), f"{source} pairwise")
        for c in controllers:
            _check_typed(data["per_controller"][c], ControllerStats, f"{source} per_controller[{c!r}]")
            others = set(controllers) - {c}
            _check_keys(data["pairwise"][c], others, f"{source} pairwise[{c!r}]")
            for other in others:
                _check_typed(data["pairwise"][c][other], PairStats, f"{source} pairwise[{c!r}][{other!r}]")
        names, required = row_fields(EpisodeResult)
        episodes = []
        for n, e in enumerate(data["episodes"]):
            if not isinstance(e, dict) or not required <= set(e) <= names:
                raise LogFormatError(f"{source} episodes[{n}] does not match the EpisodeResult schema "
                                     f"(fields {sorted(names)}); was it written by another esper version?")
            episodes.append(EpisodeResult(**e))
        return cls(controllers, episodes, float(data["tie_threshold"]), int(data["seed"]),
                   dict(data["per_controller"]), {c: dict(data["pairwise"][c]) for c in controllers},
                   dict(data["matched"]))


def _check_keys(value: Any, keys: set[str], where: str) -> None:
    if not isinstance(value, dict) or set(value) != keys:
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise LogFormatError(f"{where} does not match the comparison schema (keys {sorted(keys)}, got {got}); "
                             f"was it written by another esper version?")


def _check_typed(value: Any, schema: type, where: str) -> None:
    """`value` has exactly the keys of the TypedDict `schema`, recursively for nested TypedDicts."""
    hints = get_type_hints(schema)
    _check_keys(value, set(hints), where)
    for key, hint in hints.items():
        if is_typeddict(hint):
            _check_typed(value[key], hint, f"{where}[{key!r}]")
