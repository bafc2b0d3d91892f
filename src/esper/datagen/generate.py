"""Episode generation: one real morphogenetic episode (or one static twin) per plan, on the shared episode layer.

An environment preset decides the host architecture, the optimizers and the batch size; the task decides the
data. Both are combined into a task variant, so every episode runs through the same `MorphoEnv` and epoch loop as
training and evaluation do. The plan's paired seed fixes the host initialization and the data order, so every
behaviour policy on (config, seed) starts from the same network and sees the same batches, and the static twin of
(config, seed) — a seedless env with that seed — is trained once and shared: its stored curves give each episode
exactly the twin measurements a live twin trained beside it would have given.

`generate_twin` and `generate_episode` are the orchestrator's job functions: module-level, picklable, and
deterministic for a fixed thread count, so every placement of the workers produces the same files.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ConfigDict, Field, StrictInt, field_validator
from torch import nn

from esper.data.optim import OptimizerSpec
from esper.data.tasks import DataCache, DataOptions, TaskSpec, get_task_spec
from esper.datagen.architectures import create_model
from esper.datagen.configs import EnvironmentConfig
from esper.datagen.plans import EpisodeTask, TwinPlan
from esper.datagen.records import EpisodeRecorder, feature_schema, now_iso
from esper.datagen.schema import SCHEMA_VERSION
from esper.env import EnvSpec, EpochData, MorphoEnv, run_episodes
from esper.env.charges import ParamCost, charged_cost
from esper.env.rewards import RewardConfig, RewardFamily, RewardFn, compute_reward, reward_config
from esper.env.setting import EpisodeScale
from esper.execution.devices import resolve_device
from esper.leyline import CANONICAL_SLOTS
from esper.leyline.constants import DEFAULT_GAMMA, MAX_SAMPLES
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed
from esper.tamiyo import StaticPolicy

__all__ = ["STORED_FAMILY", "EpisodeSetup", "GenerateOptions", "datagen_task", "datagen_task_name", "episode_setup",
           "generate_episode", "generate_twin"]

DEFAULT_MAX_EPOCHS = 25


def datagen_task_name(task: str) -> str:
    """The canonical name of an image-classification task (any registered one, a plugin's or an `npz:` form
    included): datagen's environment presets are image CNNs."""
    spec = get_task_spec(task)
    if spec.topology != "cnn" or spec.task_type != "classification":
        raise UserInputError(f"Datagen's environment presets are image CNNs, and task '{spec.name}' is a "
                             f"{spec.topology} {spec.task_type} task: choose an image-classification task")
    return spec.name


class GenerateOptions(EpisodeScale):
    """Generation-wide settings (the same for every episode of a dataset) and where the data lives: the episodes'
    scale (task, episode length, sample caps, augmentation; each environment preset brings the rest of the setting),
    the gap reward's λ_p and the data directory.

    `param_cost` is λ_p (pp per 100 % added parameters); `for_task` fills it from the task's value measured at the
    sample cap nearest `max_train_samples`. Everything but the data location shapes the episodes, so `settings()`
    enters the matrix hash.
    """

    model_config = ConfigDict(frozen=True)
    KIND: ClassVar[str] = "generation option"

    task: str
    max_train_samples: StrictInt | None = Field(default=None, ge=2, le=MAX_SAMPLES)
    max_val_samples: StrictInt | None = Field(default=None, ge=2, le=MAX_SAMPLES)
    param_cost: ParamCost
    data_dir: str = "data"

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        return datagen_task_name(v)

    @classmethod
    def for_task(cls, task: str, param_cost: float | None = None, **kwargs: Any) -> GenerateOptions:
        """Options whose λ_p is `param_cost`, or the task's one measured nearest their training-sample cap; a
        task without one needs it given."""
        task = datagen_task_name(task)
        return cls(task=task, param_cost=charged_cost("param", task, param_cost, kwargs.get("max_train_samples")),
                   **kwargs)

    def settings(self) -> dict[str, Any]:
        """The values that shape every episode (the augmentation as it is in force); stored top-level in each episode
        and twin file."""
        return {"task": self.task, "max_epochs": self.max_epochs, "max_train_samples": self.max_train_samples,
                "max_val_samples": self.max_val_samples, "param_cost": self.param_cost,
                "augment": get_task_spec(self.task).augment_in_force(self.augment)}


def _optimizer(config: EnvironmentConfig) -> OptimizerSpec:
    """The preset's optimizer; seeds get the same (type, learning rate, momentum, weight decay) as the host."""
    if config.optimizer == "Adam":
        return OptimizerSpec(name="adam", lr=config.learning_rate, weight_decay=config.weight_decay)
    return OptimizerSpec(name="sgd", lr=config.learning_rate, momentum=config.momentum,
                         weight_decay=config.weight_decay)


def datagen_task(task: TaskSpec, config: EnvironmentConfig) -> TaskSpec:
    """The task with the preset's host architecture, optimizers and batch size (data, lifecycle and loss scales
    stay the task's)."""
    if task.topology != "cnn" or len(task.input_shape) != 3:
        raise ValueError(f"Datagen architectures are image CNNs; task '{task.name}' has {task.topology} inputs "
                         f"{task.input_shape}")
    in_channels, num_classes = task.input_shape[0], task.num_outputs

    def host(width: float = 1.0) -> nn.Module:
        if width != 1.0:
            raise ValueError(f"Datagen architectures have fixed widths; {config.architecture} cannot be scaled "
                             f"by {width}")
        return create_model(config.architecture, num_classes=num_classes, in_channels=in_channels)

    optimizer = _optimizer(config)
    return dataclasses.replace(task, host_factory=host, host_optimizer=optimizer, seed_optimizer=optimizer,
                               default_batch_size=config.batch_size)


STORED_FAMILY = RewardFamily.GAP
"""The reward the episodes are run with and store; the other families are recorded beside it."""


@dataclass(frozen=True)
class EpisodeSetup:
    """What an episode and its twin share: the task variant, the data in its seeded order, the env spec and every
    reward family's config (gap charging the generation's λ_p)."""

    config: EnvironmentConfig
    task: TaskSpec
    data: EpochData
    spec: EnvSpec
    rewards: dict[str, RewardConfig]

    @property
    def reward_fn(self) -> RewardFn:
        """The stored family's reward, the one the episode loop computes."""
        stored = self.rewards[STORED_FAMILY]
        return lambda record: compute_reward(record, stored, DEFAULT_GAMMA)

    def recorder(self, env: MorphoEnv) -> EpisodeRecorder:
        """Records `env`'s decisions with their reward in every family."""
        return EpisodeRecorder(env, self.rewards, DEFAULT_GAMMA)


def episode_setup(env_config_id: str, seed: int, options: GenerateOptions, device: str, *, episode: int = 0
                  ) -> EpisodeSetup:
    """The environment of (config, seed): everything but the controller and the twin."""
    config = EnvironmentConfig.from_preset(env_config_id).with_max_epochs(options.max_epochs)
    task = datagen_task(get_task_spec(options.task), config)
    dev = resolve_device(device)
    cache = DataCache(DataOptions(data_dir=Path(options.data_dir)))
    data = EpochData.build(task, cache, [dev], batch_size=config.batch_size, seed=derive_seed(seed, "data"),
                           max_train_samples=options.max_train_samples, max_val_samples=options.max_val_samples,
                           augment=options.augment)
    spec = EnvSpec(task, CANONICAL_SLOTS, config.max_epochs, env_seed=seed, device=dev, episode=episode)
    rewards = {family.value: reward_config(family, task, param_cost=options.param_cost) for family in RewardFamily}
    return EpisodeSetup(config, task, data, spec, rewards)


def generate_twin(twin: TwinPlan, options: GenerateOptions, device: str) -> dict[str, Any]:
    """Train the static twin of (config, seed): the host alone, with the episodes' seed, optimizer and data."""
    setup = episode_setup(twin.env_config_id, twin.random_seed, options, device)
    env = MorphoEnv(setup.spec, "static")
    env.twin = env  # a static env is its own twin; it never germinates, so it trains exactly the twin's network
    run_episodes([env], [StaticPolicy()], setup.data, setup.reward_fn)
    return {"val_accuracy_curve": list(env.accuracy_curve), "val_loss_curve": list(env.loss_curve),
            "architecture": setup.config.architecture, "host_params": env.model.host_param_count,
            "rollbacks": env.rollbacks}


def generate_episode(job: EpisodeTask, options: GenerateOptions, device: str) -> dict[str, Any]:
    """One episode of the plan's behaviour policy, measured against the plan's stored twin."""
    plan = job.plan
    started = now_iso()
    setup = episode_setup(plan.env_config_id, plan.seed, options, device, episode=plan.episode_idx)
    policy = plan.create_policy(setup.task.action_space)
    env = MorphoEnv(setup.spec, policy.name, twin=job.twin)
    recorder = setup.recorder(env)
    run_episodes([env], [policy], setup.data, setup.reward_fn, on_step=recorder.record)
    return {
        "schema_version": SCHEMA_VERSION,
        "episode_id": plan.episode_id,
        "random_seed": plan.seed,
        **options.settings(),
        "topology": setup.task.topology,
        "enabled_slots": list(setup.spec.slots),
        "dataset_name": options.task,
        "model_name": setup.config.architecture,
        "feature_schema": feature_schema(setup.task.action_space),
        "behavior_policy": plan.get_policy_config().to_dict(),
        "environment": setup.config.to_dict(),
        "initial_lr": setup.config.learning_rate,
        "twin": plan.twin.twin_block(job.twin),
        **recorder.summary(),
        "started_at": started,
        "ended_at": now_iso(),
    }
