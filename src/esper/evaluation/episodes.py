"""Paired episodes: every controller of a comparison on the same host seed and data order, advancing together.

For episode i every controller gets an env with the seed `seed + 1000·i` (identical host initialization) and all of
them advance together, batch-first, on the same shared batches, so differences come from the decisions alone. When
the reward needs a static twin, the plain `static` controller's env serves as the twin if there is one (it is the
twin, bit for bit); otherwise a twin env is added.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from esper.env import EnvSpec, EnvStep, EpisodeResult, EpochData, MorphoEnv, run_episodes
from esper.env.rewards import RewardFamily, make_reward_fn, needs_twin, reward_summary
from esper.evaluation.controllers import all_controllers
from esper.leyline import TelemetryEvent, TelemetryEventType, TelemetrySink
from esper.leyline.constants import DEFAULT_GAMMA
from esper.leyline.seeding import derive_seed
from esper.runtime.devices import env_device_map
from esper.runtime.rundir import RunDirectory
from esper.runtime.tasks import DataCache, TaskSpec
from esper.tamiyo import ControllerContext, ControllerSpec, StaticPolicy, TamiyoPolicy

__all__ = ["EpisodePlan", "build_controller", "episode_seed", "run_controller_episodes"]


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
    context = ControllerContext(topology=plan.task.topology, slots=plan.slots, max_epochs=plan.max_epochs,
                                seed=plan.seed, episode=plan.first_episode + episode, index=index)
    return all_controllers().build(spec, context)


def _host_width(controller: TamiyoPolicy) -> float:
    return controller.host_width if isinstance(controller, StaticPolicy) else 1.0


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
        data = EpochData.build(task, cache, plan.devices, batch_size=plan.batch_size,
                               seed=derive_seed(plan.seed, plan.first_episode + episode),
                               max_train_samples=plan.max_train_samples, max_val_samples=plan.max_val_samples)
        controllers = [build_controller(spec, plan, episode=episode, index=i) for i, spec in enumerate(specs)]

        def spec_for(i: int, width: float = 1.0, *, ep: int = episode, s: int = seed) -> EnvSpec:
            return EnvSpec(task, plan.slots, plan.max_epochs, s, device_of[i], env_id=i, episode=ep,
                           max_seeds=plan.max_seeds, amp=plan.amp, sink=sink, host_width=width)

        twin: MorphoEnv | None = None
        static = [i for i, c in enumerate(controllers) if isinstance(c, StaticPolicy) and c.host_width == 1.0]
        if with_twin and static:
            twin = MorphoEnv(spec_for(static[0]), names[static[0]])
            twin.twin = twin  # the plain static env is its own twin: its gap is zero by construction
        elif with_twin:
            twin = MorphoEnv(spec_for(len(specs)), "twin")
        envs = [twin if twin is not None and static and i == static[0]
                else MorphoEnv(spec_for(i, _host_width(c)), names[i], twin=twin)
                for i, c in enumerate(controllers)]

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
