"""Head-to-head comparison of controllers on identical env seeds and data order.

For episode i every controller gets an env with the same seed (identical host initialization) and all of them
advance together, batch-first, on the same shared batches, so differences come from the decisions alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict, get_type_hints, is_typeddict

import torch

from esper.env import EnvSpec, EnvStep, EpisodeResult, EpochData, MorphoEnv, run_episodes
from esper.env.rewards import RewardFamily, make_reward_fn
from esper.evaluation.controllers import all_controllers
from esper.evaluation.stats import MeanCI, MeanStd, PairStats, compare_pair, mean_ci, mean_std
from esper.leyline import LifecycleOp, TelemetryEvent, TelemetryEventType, TelemetrySink
from esper.leyline.constants import DEFAULT_GAMMA
from esper.leyline.seeding import derive_seed
from esper.runtime.devices import env_device_map
from esper.runtime.rows import LogFormatError, row_fields
from esper.runtime.rundir import RunDirectory
from esper.runtime.tasks import DataCache, TaskSpec
from esper.tamiyo import ControllerContext, ControllerSpec, TamiyoPolicy


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
        controllers = [build_controller(spec, plan, episode=episode, index=i) for i, spec in enumerate(specs)]
        envs = [
            MorphoEnv(EnvSpec(task, plan.slots, plan.max_epochs, env_seed, device_of[i], env_id=i, episode=episode,
                              max_seeds=plan.max_seeds, amp=plan.amp, sink=sink), spec.label)
            for i, spec in enumerate(specs)
        ]

        def record(steps: list[EnvStep]) -> None:
            if run_dir is not None:
                for step in steps:
                    run_dir.append("steps.jsonl", step.row().to_dict())
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


class ControllerStats(TypedDict):
    """One controller's summary over its episodes (results.json "per_controller")."""

    episodes: int
    final_accuracy: MeanCI
    best_accuracy: MeanStd
    params_added: MeanStd
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
            "episodes": [e.to_dict() for e in self.episodes],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = FILE) -> ComparisonResult:
        """Read back `to_dict()` output; a different schema is a LogFormatError naming `source` and the key."""
        _check_keys(data, {"reference", "controllers", "tie_threshold", "seed", "per_controller", "pairwise",
                           "episodes"}, source)
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
                   dict(data["per_controller"]), {c: dict(data["pairwise"][c]) for c in controllers})


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


def build_controller(spec: ControllerSpec, plan: EpisodePlan, *, episode: int, index: int) -> TamiyoPolicy:
    """A controller ready for episode `episode`, seeded from (plan seed, episode, its position among the specs)."""
    context = ControllerContext(topology=plan.task.topology, slots=plan.slots, seed=plan.seed, episode=episode,
                                index=index)
    return all_controllers().build(spec, context)


def parse_controllers(texts: Sequence[str]) -> list[ControllerSpec]:
    """Registered controller specs; unknown names and duplicates are errors."""
    specs = [all_controllers().parse(text) for text in texts]
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"Controllers must be distinct, got {labels}")
    return specs


def check_controllers(specs: Sequence[ControllerSpec], plan: EpisodePlan) -> list[str]:
    """Build every controller once, so one that cannot drive this setup fails before any training."""
    for i, spec in enumerate(specs):
        build_controller(spec, plan, episode=0, index=i)
    return [s.label for s in specs]


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
