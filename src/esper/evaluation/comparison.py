"""Head-to-head comparison of controllers on identical env seeds and data order (DESIGN §7.3).

For episode i every controller gets an env with the same seed (identical host initialization) and all of them
advance together, batch-first, on the same shared batches, so differences come from the decisions alone.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from esper.env.env import EnvSpec, EnvStep, EpisodeResult, MorphoEnv
from esper.env.logs import step_row
from esper.env.loop import EpochData, run_episodes
from esper.env.rewards import RewardFamily, make_reward_fn
from esper.leyline import LifecycleOp, TelemetryEvent, TelemetryEventType, TelemetrySink
from esper.leyline.constants import DEFAULT_GAMMA
from esper.leyline.seeding import derive_seed
from esper.runtime.devices import env_device_map
from esper.runtime.rundir import RunDirectory
from esper.runtime.tasks import DataCache, TaskSpec
from esper.simic.ppo.controller import PPOController
from esper.tamiyo import HeuristicTamiyo, RandomPolicy, StaticPolicy, TamiyoPolicy

CONTROLLER_KINDS = ("static", "random", "heuristic", "ppo:PATH")
BOOTSTRAP_RESAMPLES = 1000


@dataclass(frozen=True)
class ControllerSpec:
    """A controller named on the command line: static, random, heuristic or ppo:PATH (checkpoint or run dir)."""

    kind: str
    path: Path | None = None

    @property
    def label(self) -> str:
        return self.kind if self.path is None else f"{self.kind}:{self.path}"

    @classmethod
    def parse(cls, text: str) -> ControllerSpec:
        kind, sep, rest = text.partition(":")
        if kind == "ppo" and rest:
            return cls(kind, Path(rest))
        if kind not in CONTROLLER_KINDS or sep:
            raise ValueError(f"Unknown controller '{text}'. Available: {', '.join(CONTROLLER_KINDS)}")
        return cls(kind)

    def check(self, task: TaskSpec, slots: Sequence[str]) -> None:
        """Fail before any training when a learned controller cannot drive this setup."""
        if self.kind == "ppo":
            self.build(task, seed=0, episode=0, index=0, slots=slots)

    def build(self, task: TaskSpec, *, seed: int, episode: int, index: int, slots: Sequence[str] = ()
              ) -> TamiyoPolicy:
        """A controller ready for episode `episode` (random controllers get their own seed per episode)."""
        if self.kind == "ppo":
            assert self.path is not None
            return PPOController.from_checkpoint(self.path, topology=task.topology, slots=slots, deterministic=True)
        if self.kind == "static":
            return StaticPolicy()
        if self.kind == "random":
            policy = RandomPolicy()
            policy.reset(derive_seed(seed, episode, index))
            return policy
        heuristic = HeuristicTamiyo(topology=task.topology)
        heuristic.reset(seed)
        return heuristic


@dataclass
class EpisodePlan:
    task: TaskSpec
    slots: tuple[str, ...]
    max_epochs: int
    max_seeds: int | None
    seed: int
    devices: Sequence[torch.device]
    batch_size: int
    max_train_samples: int | None = None
    max_val_samples: int | None = None
    amp: bool = False
    reward_family: str = RewardFamily.CONTRIBUTION.value
    gamma: float = DEFAULT_GAMMA


def run_controller_episodes(
    specs: Sequence[ControllerSpec], plan: EpisodePlan, episodes: int, cache: DataCache, *,
    sink: TelemetrySink | None = None, run_dir: RunDirectory | None = None,
    on_step: Callable[[list[EnvStep]], None] | None = None,
    on_episode: Callable[[int, list[EpisodeResult], list[MorphoEnv]], None] | None = None,
) -> list[EpisodeResult]:
    """Run `episodes` episodes; in each, one env per controller with the shared env seed seed + 1000·i."""
    task = plan.task
    reward_fn = make_reward_fn(plan.reward_family, task, plan.gamma)
    device_of = env_device_map(max(len(specs), len(plan.devices)), plan.devices)
    results: list[EpisodeResult] = []
    for episode in range(episodes):
        env_seed = plan.seed + 1000 * episode
        data = EpochData.build(task, cache, plan.devices, batch_size=plan.batch_size,
                               seed=derive_seed(plan.seed, episode), max_train_samples=plan.max_train_samples,
                               max_val_samples=plan.max_val_samples)
        controllers = [spec.build(task, seed=plan.seed, episode=episode, index=i, slots=plan.slots)
                       for i, spec in enumerate(specs)]
        envs = [
            MorphoEnv(EnvSpec(task, plan.slots, plan.max_epochs, env_seed, device_of[i], env_id=i, episode=episode,
                              max_seeds=plan.max_seeds, amp=plan.amp, sink=sink), spec.label)
            for i, spec in enumerate(specs)
        ]

        def record(steps: list[EnvStep]) -> None:
            if run_dir is not None:
                for step in steps:
                    run_dir.append("steps.jsonl", step_row(step))
            if on_step is not None:
                on_step(steps)

        episode_results = run_episodes(envs, controllers, data, reward_fn, on_step=record)
        for r in episode_results:
            if run_dir is not None:
                run_dir.append("episodes.jsonl", r.to_dict())
            if sink is not None and sink.wants(TelemetryEventType.COMPARISON_EPISODE_COMPLETED):
                sink.emit(TelemetryEvent(TelemetryEventType.COMPARISON_EPISODE_COMPLETED, env_id=r.env_id,
                                         message=f"{r.controller} episode {episode}: {r.final_accuracy:.2f}%",
                                         data={"controller": r.controller, "episode": episode,
                                               "final_accuracy": r.final_accuracy}))
        if on_episode is not None:
            on_episode(episode, episode_results, envs)
        results.extend(episode_results)
    return results


def _mean_std(values: Sequence[float]) -> dict[str, float]:
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


@dataclass
class ComparisonResult:
    controllers: list[str]
    episodes: list[EpisodeResult]
    tie_threshold: float
    seed: int
    per_controller: dict[str, dict[str, Any]] = field(default_factory=dict)
    pairwise: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def from_episodes(cls, controllers: list[str], episodes: list[EpisodeResult], *, tie_threshold: float,
                      seed: int) -> ComparisonResult:
        result = cls(controllers, episodes, tie_threshold, seed)
        by = {c: sorted((e for e in episodes if e.controller == c), key=lambda e: e.episode) for c in controllers}
        for c, eps in by.items():
            actions = {op.name: statistics.fmean(e.action_counts[op.name] / max(1, sum(e.action_counts.values()))
                                                 for e in eps) for op in LifecycleOp}
            result.per_controller[c] = {
                "episodes": len(eps),
                "final_accuracy": _mean_std([e.final_accuracy for e in eps]),
                "best_accuracy": _mean_std([e.best_accuracy for e in eps]),
                "params_added": _mean_std([float(e.params_added) for e in eps]),
                "seeds_created": statistics.fmean(e.seeds_created for e in eps),
                "seeds_fossilized": statistics.fmean(e.seeds_fossilized for e in eps),
                "seeds_culled": statistics.fmean(e.seeds_culled for e in eps),
                "total_reward": _mean_std([e.total_reward for e in eps]),
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
            "episodes": [e.to_dict() for e in self.episodes],
        }


def check_controllers(specs: Sequence[ControllerSpec], plan: EpisodePlan) -> list[str]:
    """Distinct controllers that can all drive this setup; returns their labels."""
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"Controllers must be distinct, got {labels}")
    for spec in specs:
        spec.check(plan.task, plan.slots)
    return labels


def run_comparison(specs: Sequence[ControllerSpec], plan: EpisodePlan, episodes: int, cache: DataCache, *,
                   tie_threshold: float = 0.5, sink: TelemetrySink | None = None,
                   run_dir: RunDirectory | None = None,
                   on_step: Callable[[list[EnvStep]], None] | None = None) -> ComparisonResult:
    labels = check_controllers(specs, plan)
    results = run_controller_episodes(specs, plan, episodes, cache, sink=sink, run_dir=run_dir, on_step=on_step)
    comparison = ComparisonResult.from_episodes(labels, results, tie_threshold=tie_threshold, seed=plan.seed)
    if run_dir is not None:
        run_dir.write_json("results.json", comparison.to_dict())
    return comparison
