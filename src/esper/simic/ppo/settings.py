"""The episodes a PPO run trains: one setting for every env group, or, across a task family, one per training type.

A run on a task trains every group of a batch on the batch's one data seed (one sample subset and batch order). A run
across a family gives each group a data seed of its own, `(seed, training stream, batch, group, "data")`, and the
group trains on the instance type that seed draws (`training_type`: uniform over the training types, a held-out one
raises `HeldOutLeak`), with that type's task, sample cap and λ_p. Types are mixed within a batch, so one PPO update
sees several of them.

λ_p per type. What widening a host buys depends on the type (its host width, its data, its sample cap): a narrow host
on a small clean set gains far more from added width than a wide host on noisy data, so one λ_p for all would make
growth cheap on some types and dear on others. Each training type is therefore charged its own λ_p, measured for its
own setting as `param_cost: "auto"` measures a task's (the static host at widths 1, 1.5 and 2 on calibration seeds;
cached), or given by hand per type (`type_param_costs`). The recorded per-task calibrations cannot serve: they are of
the base tasks' hosts at width 1 and no corruption.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from esper.data.families import Family, family_task, get_family, training_type
from esper.data.tasks import get_task_spec
from esper.env.groups import EpisodeRecipe
from esper.env.reward_setting import RewardSetting
from esper.env.rewards import reward_config, reward_summary
from esper.env.setting import EpisodeSetting
from esper.leyline.seeding import SeedStream, derive_seed
from esper.simic.ppo.config import TrainingConfig

__all__ = ["TrainingSettings", "group_data_seeds"]


def group_data_seeds(seed: int, batch: int, groups: int) -> list[int]:
    """The data seed of each env group of a family run's batch `batch`, from the training seed stream."""
    return [derive_seed(seed, SeedStream.TRAINING, batch, g, "data") for g in range(groups)]


def _recipe(setting: EpisodeSetting, reward: RewardSetting, param_cost: float | None) -> EpisodeRecipe:
    config = reward_config(reward.reward_family, get_task_spec(setting.task), reward.sparse(), param_cost,
                           charge=reward.charge, compute_cost=reward.charged_compute_cost(),
                           max_train_samples=setting.max_train_samples)
    return EpisodeRecipe(setting, config, reward.gamma)


@dataclass(frozen=True)
class TrainingSettings:
    """`base`: the recipe of a task run's every group (of a family run, its first training type's, which only carries
    what every type shares: a group always brings its own). `types`: a family run's recipe per training type."""

    base: EpisodeRecipe
    family: Family | None = None
    types: dict[str, EpisodeRecipe] = field(default_factory=dict)

    @classmethod
    def of(cls, config: TrainingConfig) -> TrainingSettings:
        episode, reward = config.episode, config.reward
        if config.family is None:
            return cls(_recipe(episode, reward, reward.charged_param_cost()))
        family = get_family(config.family)
        types = {t.name: _recipe(episode.with_overrides(task=family_task(family, t),
                                                        max_train_samples=t.max_train_samples),
                                 reward, reward.charged_param_cost(t.name)) for t in family.training}
        return cls(types[family.training[0].name], family, types)

    @property
    def tasks(self) -> list[str]:
        """Every task the run's episodes train on."""
        recipes = self.types.values() if self.family is not None else [self.base]
        return [r.setting.task for r in recipes]

    def data_seeds(self, seed: int, batch: int, groups: int, batch_data_seed: int) -> list[int]:
        """Each group's data seed: the batch's for a task run, a group's own for a family run."""
        if self.family is None:
            return [batch_data_seed] * groups
        return group_data_seeds(seed, batch, groups)

    def of_group(self, data_seed: int) -> EpisodeRecipe | None:
        """The recipe of the group with `data_seed` (None: the call's, `base`)."""
        if self.family is None:
            return None
        return self.types[training_type(self.family, data_seed).name]

    def describe_reward(self, reward: RewardSetting) -> str:
        """The reward the run learns from, with the λ it charges (λ_p per training type across a family)."""
        if self.family is None:
            setting = self.base.setting
            return reward_summary(reward.reward_family, get_task_spec(setting.task), reward.charged_param_cost(),
                                  charge=reward.charge, compute_cost=reward.charged_compute_cost(),
                                  max_train_samples=setting.max_train_samples)
        if reward.type_param_costs is None:
            return reward.reward_family.value
        costs = ", ".join(f"{name} {cost:g}" for name, cost in reward.type_param_costs.items())
        return f"{reward.reward_family.value}, λ_p per training type: {costs}"
