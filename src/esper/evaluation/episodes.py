"""Paired episodes: every controller of a comparison on the same host seed and data order, advancing together.

For episode i every controller gets an env with the episode's host and data seeds from the plan's seed stream
(identical host initialization, the same sample subset and data order) and all of them advance together,
batch-first, on the same shared batches, so differences come from the decisions alone. When the reward needs a
static twin, the plain `static` controller's env serves as the twin if there is one (it is the twin, bit for
bit); otherwise a twin env is added.

After the last epoch each final model is scored once on the test split, which nothing before that point reads: the
decisions, rewards and validation numbers of an episode cannot depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from esper.data.tasks import DataCache, TaskSpec, get_task_spec
from esper.env import EpisodeResult
from esper.env.charges import Charge
from esper.env.driver import EnvPool
from esper.env.groups import EpisodeRecipe, GroupPlan, MemberPlan, StepOutcome, TwinEnvPlan
from esper.env.rewards import RewardConfig, RewardFamily, needs_twin, reward_config, reward_summary
from esper.env.setting import EpisodeSetting
from esper.evaluation.controllers import all_controllers
from esper.evaluation.stats import one_sample_pp
from esper.execution.devices import env_device_map
from esper.execution.workers import WorkerOptions
from esper.leyline import TelemetryEvent, TelemetryEventType, TelemetrySink
from esper.leyline.constants import DEFAULT_GAMMA
from esper.leyline.seeding import SeedStream, episode_seeds
from esper.storage.rundir import RunDirectory
from esper.tamiyo import ControllerContext, ControllerSpec, StaticPolicy, TamiyoDecision, TamiyoPolicy, host_variant

__all__ = [
    "EpisodePlan",
    "build_controller",
    "one_test_sample",
    "paired_seeds",
    "run_controller_episodes",
    "test_sample_count",
]


@dataclass
class EpisodePlan:
    """Everything that makes the episodes of a comparison paired: the episodes' setting (task, slots, length, caps,
    batch, schedule, augmentation), seeds, devices, the test sample and the reward logged per decision."""

    episode: EpisodeSetting
    seed: int
    devices: Sequence[torch.device]
    max_test_samples: int | None = None  # None: the whole test split (forward passes only)
    reward_family: str = RewardFamily.GAP.value
    param_cost: float | None = None  # gap reward's λ_p; None: the task's value measured at the nearest sample cap
    charge: Charge = "param"  # what the gap reward charges: added parameters (λ_p) or training compute (λ_c)
    compute_cost: float | None = None  # gap reward's λ_c (charge "compute"); None: the task's, as for λ_p
    gamma: float = DEFAULT_GAMMA
    stream: SeedStream = SeedStream.EVALUATION  # selection episodes draw other seeds than evaluation (and training)
    workers: WorkerOptions = field(default_factory=WorkerOptions)  # where the episodes run (never what they compute)
    allow_setting_change: bool = False  # learned policies may run outside the setting they were trained in
    tuned_heuristic: Path | None = None  # the record `heuristic:tuned` runs (a study's own tuned heuristic)

    @cached_property
    def task(self) -> TaskSpec:
        """The task the episodes train on."""
        return get_task_spec(self.episode.task)

    def describe_reward(self) -> str:
        """The reward logged per decision, with the charge's cost it resolves to for this task and sample cap."""
        return reward_summary(self.reward_family, self.task, self.param_cost, charge=self.charge,
                              compute_cost=self.compute_cost, max_train_samples=self.episode.max_train_samples,
                              logged_only=True)

    def reward_config(self) -> RewardConfig:
        """The reward logged per decision (nothing learns from it: a missing λ leaves the charge out)."""
        return reward_config(self.reward_family, self.task, param_cost=self.param_cost, charge=self.charge,
                             compute_cost=self.compute_cost, max_train_samples=self.episode.max_train_samples,
                             logged_only=True)


def paired_seeds(plan: EpisodePlan, episode: int) -> tuple[int, int]:
    """(host seed, data seed) every controller shares in episode `episode`, from the plan's seed stream."""
    return episode_seeds(plan.seed, plan.stream, episode)


def build_controller(spec: ControllerSpec, plan: EpisodePlan, *, episode: int, index: int) -> TamiyoPolicy:
    """A controller ready for episode `episode`, seeded from (plan seed, episode, its position among the specs)."""
    lifecycle = plan.task.lifecycle
    context = ControllerContext(space=plan.task.action_space, slots=plan.episode.slots,
                                max_epochs=plan.episode.max_epochs,
                                seed=paired_seeds(plan, episode)[0], index=index,
                                seed_training_epochs=max(1, lifecycle.min_training_epochs),
                                seed_blending_epochs=max(lifecycle.blending_steps, lifecycle.min_blending_epochs),
                                setting=plan.episode.controller_setting(),
                                allow_setting_change=plan.allow_setting_change,
                                tuned_heuristic=plan.tuned_heuristic)
    return all_controllers().build(spec, context)


def test_sample_count(plan: EpisodePlan, cache: DataCache) -> int:
    """How many samples (images, or predicted tokens) one test pass scores: one of them is the smallest difference
    in test accuracy that two final models can show."""
    pool = cache.pool(plan.task, "test", plan.devices[0])
    if plan.max_test_samples is not None and plan.max_test_samples < pool.num_full:
        return plan.max_test_samples * pool.targets[0].numel()
    tail = 0 if pool.tail is None else pool.tail[1].numel()
    return pool.targets.numel() + tail


def one_test_sample(plan: EpisodePlan, cache: DataCache) -> float:
    """The default tie threshold of a comparison: one test sample's worth of accuracy, in pp."""
    return one_sample_pp(test_sample_count(plan, cache))


def _paired_group(specs: Sequence[ControllerSpec], names: Sequence[str], plan: EpisodePlan, episode: int,
                  device_of: Sequence[torch.device]) -> tuple[GroupPlan, list[TamiyoPolicy]]:
    """Episode `episode` as one env group (every controller on the episode's host seed and data) and its
    controllers. When the reward needs a static twin, the plain `static` controller's env serves as the twin if there
    is one (it is the twin, bit for bit); otherwise a twin env is added."""
    controllers = [build_controller(spec, plan, episode=episode, index=i) for i, spec in enumerate(specs)]
    members = []
    for i, (controller, name) in enumerate(zip(controllers, names, strict=True)):
        width, fixed = host_variant(controller)
        members.append(MemberPlan(i, name, str(device_of[i]), episode=episode, host_width=width,
                                  fixed_modules=fixed))
    twin: TwinEnvPlan | int | None = None
    if needs_twin(plan.reward_family):
        static = [i for i, c in enumerate(controllers) if isinstance(c, StaticPolicy) and c.host_width == 1.0]
        twin = static[0] if static else TwinEnvPlan(len(specs), str(device_of[len(specs)]), episode=episode,
                                                 telemetry=True)
    host_seed, data_seed = paired_seeds(plan, episode)
    group = GroupPlan(seed=host_seed, data_seed=data_seed, members=tuple(members), twin=twin)
    return group, controllers


EpisodeCallback = Callable[[int, list[EpisodeResult], list[dict[str, Any] | None]], None]
"""Called after each paired episode with its index, its results and (when kept) its final models."""


def run_controller_episodes(
    specs: Sequence[ControllerSpec], plan: EpisodePlan, episodes: int, pool: EnvPool, *,
    sink: TelemetrySink | None = None, run_dir: RunDirectory | None = None, on_episode: EpisodeCallback | None = None,
    labels: Sequence[str] | None = None, start: int = 0, keep_models: bool = False,
) -> list[EpisodeResult]:
    """Run paired episodes `start` .. `episodes` − 1 of every controller (a resumed run starts past the episodes it
    finished) on the env hosts of `pool`; `labels` (default: the specs' labels) name them. As many episodes as the
    pool has workers run side by side; each episode's steps, results and callback still come in episode order."""
    names = list(labels) if labels is not None else [s.label for s in specs]
    recipe = EpisodeRecipe(plan.episode, plan.reward_config(), plan.gamma, max_test_samples=plan.max_test_samples,
                           score_test=True, keep_models=keep_models)
    device_of = env_device_map(max(len(specs) + 1, len(plan.devices)), plan.devices)
    results: list[EpisodeResult] = []
    for first in range(start, episodes, len(pool.actors)):
        batch = range(first, min(first + len(pool.actors), episodes))
        paired = [_paired_group(specs, names, plan, episode, device_of) for episode in batch]
        rows: dict[int, list[dict[str, Any]]] = {episode: [] for episode in batch}

        def record(steps: list[tuple[StepOutcome, TamiyoDecision]], rows: dict[int, list[Any]] = rows) -> None:
            for step, _ in steps:
                rows[step.row["episode"]].append(step.row)

        finished = pool.run(recipe, [group for group, _ in paired], [c for _, cs in paired for c in cs], sink=sink,
                            on_steps=record)
        assert finished is not None  # nothing asks it to stop early
        for j, episode in enumerate(batch):
            episode_results = finished.results[j * len(specs):(j + 1) * len(specs)]
            _record_episode(episode, episode_results, rows[episode], run_dir, sink)
            if on_episode is not None:
                on_episode(episode, episode_results, finished.models[j * len(specs):(j + 1) * len(specs)])
            results.extend(episode_results)
    return results


def _record_episode(episode: int, results: Sequence[EpisodeResult], rows: Sequence[dict[str, Any]],
                    run_dir: RunDirectory | None, sink: TelemetrySink | None) -> None:
    if run_dir is not None:
        for row in rows:
            run_dir.append("steps.jsonl", row)
        for r in results:
            run_dir.append("episodes.jsonl", r.to_dict())
    if sink is not None and sink.wants(TelemetryEventType.COMPARISON_EPISODE_COMPLETED):
        for r in results:
            sink.emit(TelemetryEvent(TelemetryEventType.COMPARISON_EPISODE_COMPLETED, env_id=r.env_id,
                                     message=f"{r.controller} episode {episode}: {r.final_accuracy:.2f}%",
                                     data={"controller": r.controller, "episode": episode,
                                           "final_accuracy": r.final_accuracy}))
