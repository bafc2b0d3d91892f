"""Paired episodes: every controller of a comparison on the same host seed and data order, advancing together.

For episode i every controller gets an env with the seed `seed + 1000·i` (identical host initialization) and all of
them advance together, batch-first, on the same shared batches (the same capped subsets), so differences come from
the decisions alone. When the reward needs a static twin, the plain `static` controller's env serves as the twin if
there is one (it is the twin, bit for bit); otherwise a twin env is added.

After the last epoch each final model is scored once on the test split, which nothing before that point reads: the
decisions, rewards and validation numbers of an episode cannot depend on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from esper.env import EnvSpec, EnvStep, EpisodeResult, EpochData, MorphoEnv, run_episodes
from esper.env.rewards import RewardFamily, make_reward_fn, needs_twin, reward_summary
from esper.evaluation.controllers import all_controllers
from esper.evaluation.stats import one_sample_pp
from esper.leyline import TelemetryEvent, TelemetryEventType, TelemetrySink
from esper.leyline.constants import DEFAULT_GAMMA
from esper.leyline.seeding import derive_seed
from esper.runtime.data import SharedBatchIterator
from esper.runtime.devices import env_device_map
from esper.runtime.rundir import RunDirectory
from esper.runtime.tasks import DataCache, TaskSpec
from esper.tamiyo import ControllerContext, ControllerSpec, StaticPolicy, TamiyoPolicy, host_variant
from esper.tolaria import finish_validation, validate_batch

__all__ = [
    "EpisodePlan",
    "build_controller",
    "episode_seed",
    "one_test_sample",
    "run_controller_episodes",
    "score_test",
    "test_sample_count",
]


@dataclass
class EpisodePlan:
    """Everything that makes the episodes of a comparison paired: task, slots, length, seeds, devices, data caps."""

    task: TaskSpec
    slots: tuple[str, ...]
    max_epochs: int
    max_seeds: int | None
    seed: int
    devices: Sequence[torch.device]
    batch_size: int
    max_train_samples: int | None = None
    max_val_samples: int | None = None
    max_test_samples: int | None = None  # None: the whole test split (forward passes only)
    amp: bool = False
    reward_family: str = RewardFamily.GAP.value
    param_cost: float | None = None  # gap reward's λ_p; None: the task's value measured at the nearest sample cap
    gamma: float = DEFAULT_GAMMA
    first_episode: int = 0  # held-out evaluations start their paired seeds elsewhere than training did

    def describe_reward(self) -> str:
        """The reward logged per decision, with the parameter cost it resolves to for this task and sample cap."""
        return reward_summary(self.reward_family, self.task, self.param_cost, max_train_samples=self.max_train_samples)


def episode_seed(plan: EpisodePlan, episode: int) -> int:
    """The host seed every controller shares in episode `episode`."""
    return plan.seed + 1000 * (plan.first_episode + episode)


def build_controller(spec: ControllerSpec, plan: EpisodePlan, *, episode: int, index: int) -> TamiyoPolicy:
    """A controller ready for episode `episode`, seeded from (plan seed, episode, its position among the specs)."""
    lifecycle = plan.task.lifecycle
    context = ControllerContext(topology=plan.task.topology, slots=plan.slots, max_epochs=plan.max_epochs,
                                seed=plan.seed, episode=plan.first_episode + episode, index=index,
                                seed_training_epochs=lifecycle.min_training_epochs,
                                seed_blending_epochs=max(lifecycle.blending_steps, lifecycle.min_blending_epochs))
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


def score_test(envs: Sequence[MorphoEnv], results: Sequence[EpisodeResult], plan: EpisodePlan, cache: DataCache,
               seed: int) -> list[EpisodeResult]:
    """The envs' results with their final models' test accuracy and loss (one forward pass per test batch, each
    batch materialized once per device for every env on it)."""
    keys = sorted({env.device_key for env in envs})
    test = SharedBatchIterator({k: cache.get(plan.task, "test", k, plan.max_test_samples, seed=seed) for k in keys},
                               plan.task.val_batch_size, shuffle=False)
    for batch in test:
        for env in envs:
            x, y = batch[env.device_key]
            validate_batch(env.ts, x, y)
    scored = [finish_validation(env.ts) for env in envs]
    return [dataclasses.replace(r, final_test_accuracy=s.val_accuracy, final_test_loss=s.val_loss)
            for r, s in zip(results, scored, strict=True)]


def run_controller_episodes(
    specs: Sequence[ControllerSpec], plan: EpisodePlan, episodes: int, cache: DataCache, *,
    sink: TelemetrySink | None = None, run_dir: RunDirectory | None = None,
    on_step: Callable[[list[EnvStep]], None] | None = None,
    on_episode: Callable[[int, list[EpisodeResult], list[MorphoEnv]], None] | None = None,
    labels: Sequence[str] | None = None, start: int = 0,
) -> list[EpisodeResult]:
    """Run paired episodes `start` .. `episodes` − 1 of every controller (a resumed run starts past the episodes it
    finished); `labels` (default: the specs' labels) name them."""
    task = plan.task
    names = list(labels) if labels is not None else [s.label for s in specs]
    reward_fn = make_reward_fn(plan.reward_family, task, plan.gamma, param_cost=plan.param_cost,
                               max_train_samples=plan.max_train_samples)
    with_twin = needs_twin(plan.reward_family)
    device_of = env_device_map(max(len(specs) + 1, len(plan.devices)), plan.devices)
    results: list[EpisodeResult] = []
    for episode in range(start, episodes):
        seed = episode_seed(plan, episode)
        data_seed = derive_seed(plan.seed, plan.first_episode + episode)
        data = EpochData.build(task, cache, plan.devices, batch_size=plan.batch_size, seed=data_seed,
                               max_train_samples=plan.max_train_samples, max_val_samples=plan.max_val_samples)
        controllers = [build_controller(spec, plan, episode=episode, index=i) for i, spec in enumerate(specs)]

        def spec_for(i: int, controller: TamiyoPolicy | None = None, *, ep: int = episode, s: int = seed) -> EnvSpec:
            width, fixed = host_variant(controller) if controller is not None else (1.0, ())
            return EnvSpec(task, plan.slots, plan.max_epochs, s, device_of[i], env_id=i, episode=ep,
                           max_seeds=plan.max_seeds, amp=plan.amp, sink=sink, host_width=width, fixed_modules=fixed)

        twin: MorphoEnv | None = None
        static = [i for i, c in enumerate(controllers) if isinstance(c, StaticPolicy) and c.host_width == 1.0]
        if with_twin and static:
            twin = MorphoEnv(spec_for(static[0]), names[static[0]])
            twin.twin = twin  # the plain static env is its own twin: its gap is zero by construction
        elif with_twin:
            twin = MorphoEnv(spec_for(len(specs)), "twin")
        envs = [twin if twin is not None and static and i == static[0]
                else MorphoEnv(spec_for(i, c), names[i], twin=twin)
                for i, c in enumerate(controllers)]

        def record(steps: list[EnvStep]) -> None:
            if run_dir is not None:
                for step in steps:
                    run_dir.append("steps.jsonl", step.row().to_dict())
            if on_step is not None:
                on_step(steps)

        episode_results = score_test(envs, run_episodes(envs, controllers, data, reward_fn, on_step=record), plan,
                                     cache, data_seed)
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
