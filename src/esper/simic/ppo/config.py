"""TrainingConfig: the single source of truth for a PPO run, in sections: `episode` (the setting every episode
trains in), `ppo` (the policy and how it learns: all `PPOAgent` receives), `reward` (the reward, its charge and the
discount) and `execution` (where the run computes), beside the run's `seed`, `family` and `checkpoint_every`.

Unknown keys are rejected, so a typo in a JSON config is an error, not a silently ignored knob. A setting is named by
its dotted key (`ppo.lr`) or its plain name (`lr`, unique across the sections). Precedence: preset → --config-json →
CLI flags and --set KEY=VALUE.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import Field, StrictInt, model_validator

from esper.data.families import Family, family_task, get_family
from esper.env.charges import AUTO_COST, Charge, charged_cost
from esper.env.reward_setting import RewardSetting
from esper.env.rewards import RewardFamily
from esper.env.setting import EpisodeSetting
from esper.execution.workers import WorkerOptions
from esper.leyline.errors import UserInputError, did_you_mean
from esper.leyline.sectioned_config import SectionedConfig
from esper.leyline.seeding import MAX_BASE_SEED
from esper.simic.ppo.ppo_config import Episodes, PPOConfig

__all__ = ["PRESETS", "TrainingConfig", "charge_fields", "family_fields"]

# γ = 1: the gap reward's undiscounted return telescopes to exactly the objective the study reports (the final gap
# to the static twin net of the charge); a discount would weigh the early epochs' changes of the gap above the late
# ones' and make the policy optimize something else. The charge is training compute, at the static frontier's slope
# measured in the run's setting: a study's verdict on growth is accuracy at equal training compute, and the two
# charges choose different teachers (docs/results.md); `--set charge=param` charges parameters instead.
_TRAINING_RUN = {"max_train_samples": 1024, "max_val_samples": 512, "batch_size": 64, "max_epochs": 30,
                 "lr_schedule": "cosine", "charge": "compute", "compute_cost": AUTO_COST, "gamma": 1.0,
                 "n_episodes": 96, "n_envs": 8, "n_epochs": 4, "minibatch_size": 64}

PRESETS: dict[str, dict[str, Any]] = {
    # A workflow demo, not a result: minutes on a laptop CPU, 10-epoch episodes in which no seed can finish its
    # lifecycle (`esper study --preset quick` evaluates it end to end).
    "quick": {"task": "synthetic", "max_train_samples": 2048, "max_val_samples": 512, "n_epochs": 4,
              "minibatch_size": 32, "n_episodes": 16, "n_envs": 4, "max_epochs": 10},
    # The CPU reference studies. An episode is a training run: 30 epochs on 1,024 / 512 samples at batch 64 (480
    # optimizer steps) with learning rates annealed by a cosine, so the static host ends converged (its validation
    # accuracy flat over the last 20 % of epochs) at the accuracy 60 epochs of a constant rate reach, for half the
    # compute. λ_c is measured in exactly this setting before training (and cached). 96 episodes per training run
    # keep a study of 5 runs with every baseline within about 3 hours of a 2-core machine (README: the trade).
    "synthetic": {**_TRAINING_RUN, "task": "synthetic"},
    # Real data (Debian's dataset-fashion-mnist or --data-dir), the same regime.
    "fashion_mnist": {**_TRAINING_RUN, "task": "fashion_mnist"},
    "cifar10": {"task": "cifar10", "entropy_coef": 0.1},
    "cifar10_deep": {"task": "cifar10_deep", "entropy_coef": 0.08},
    "tinystories": {"task": "tinystories", "batch_size": 32, "entropy_anneal_episodes": 40},
}
"""Each preset's settings by plain name, on top of the defaults."""


class TrainingConfig(SectionedConfig):
    """Every setting of one PPO run; a checkpoint stores it, so it rebuilds the agent and checks resumes.

    A field added later must default to what the code did before it existed: a study phase recorded without the
    field is then still the setting it names, and is continued rather than rerun."""

    KIND: ClassVar[str] = "training config"
    seed: StrictInt = Field(default=42, ge=0, le=MAX_BASE_SEED,
                            description="base seed of every random stream of the run")
    family: str | None = Field(default=None,
                               description="train across this task family's training types (its key, e.g. "
                                           "synthetic-shift-v1): each env group trains on the type its data seed "
                                           "draws, never a held-out one")
    checkpoint_every: Episodes = Field(default=1,
                                       description="rollout batches between checkpoints (1: a killed run loses at "
                                                   "most the batch in flight)")
    episode: EpisodeSetting = Field(default_factory=EpisodeSetting)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    reward: RewardSetting = Field(default_factory=RewardSetting)
    execution: WorkerOptions = Field(default_factory=WorkerOptions)

    @model_validator(mode="after")
    def _consistency(self) -> Self:
        devices = self.execution.devices
        if devices is not None and self.ppo.n_envs < len(devices):
            raise UserInputError("n_envs must be >= the number of devices")
        self.blueprint_indices()
        self._check_family()
        return self

    def _check_family(self) -> None:
        """A family run's task is its first training type (it builds the policy's action space, which every type of
        a family shares), it has no sample cap of its own (each type brings one), and its gap reward charges each
        type its own λ_p: measured per type ("auto") or given per type, never one number for all."""
        reward = self.reward
        if self.family is None:
            if reward.type_param_costs is not None:
                raise UserInputError("type_param_costs only applies to a family run: set family or drop them")
            return
        family = get_family(self.family)
        if reward.charge != "param":
            raise UserInputError(f"a run across family {family.key} charges each training type its own λ_p; the "
                                 f"compute charge is measured per task only: drop charge={reward.charge} and its "
                                 f"compute_cost (--family charges parameters, or --set charge=param)")
        task = family_task(family, family.training[0])
        if self.episode.task != task or self.episode.max_train_samples is not None:
            raise UserInputError(f"a run across family {family.key} trains each env group on the type its data seed "
                                 f"draws, at that type's sample cap: its task is {task} (whose action space every "
                                 f"type shares) and max_train_samples null. `esper train ppo --family` and `esper "
                                 f"study --family` set both: drop --set task and max_train_samples there; in "
                                 f"--config-json or from Python, set \"task\": \"{task}\" and "
                                 f"\"max_train_samples\": null")
        if reward.reward_family != RewardFamily.GAP:
            if reward.type_param_costs is not None:
                raise UserInputError("type_param_costs only applies to reward_family 'gap'")
            return
        if reward.param_cost == AUTO_COST:
            if reward.type_param_costs is not None:
                raise UserInputError("param_cost 'auto' measures type_param_costs: give one of them (with --family, "
                                     "--set type_param_costs=... alone replaces the preset's 'auto'; in --config-json "
                                     "set \"param_cost\": null beside them)")
            return
        if reward.param_cost is not None:
            raise UserInputError(f"a run across family {family.key} charges each training type its own λ_p: drop "
                                 f"param_cost={reward.param_cost} and set param_cost 'auto' (measured per type) or "
                                 f"type_param_costs")
        names = [t.name for t in family.training]
        if reward.type_param_costs is None or sorted(reward.type_param_costs) != sorted(names):
            raise UserInputError(f"type_param_costs must give λ_p for exactly the training types {names} of family "
                                 f"{family.key} (or set param_cost 'auto' to measure them), got "
                                 f"{sorted(reward.type_param_costs or {})}")

    def blueprint_indices(self) -> frozenset[int] | None:
        """The policy's `blueprints` as indices of the task's blueprint head (None: all of them)."""
        return self.ppo.blueprint_indices(self.episode.task)

    def charge_and_cost(self) -> tuple[Charge, float]:
        """What the gap reward charges and its λ: given, else the task's measured one, else a clear refusal."""
        reward = self.reward
        given = reward.charged_compute_cost() if reward.charge == "compute" else reward.charged_param_cost()
        return reward.charge, charged_cost(reward.charge, self.episode.task, given, self.episode.max_train_samples)

    # ------------------------------------------------------------------ construction

    @classmethod
    def preset(cls, name: str) -> TrainingConfig:
        if name not in PRESETS:
            raise UserInputError(f"Unknown preset '{name}'{did_you_mean(name, PRESETS)}. Available: {sorted(PRESETS)}")
        return cls.from_dict(PRESETS[name])


_COST_OF = {"param": "reward.param_cost", "compute": "reward.compute_cost"}


def charge_fields(base: RewardSetting, overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides` (by dotted key) on `base` (a preset's reward), completed where they change what it charges, so
    that naming the change alone makes a complete config:
    - naming the other charge clears the preset's cost of its own and, unless the user gives a cost, moves the
      preset's request to measure λ in the run's setting ("auto") to the named charge (none: the task's λ); a given
      λ of one charge is never read as the other's;
    - a reward family other than `gap` (which alone is charged) clears the preset's charge and costs."""
    given = set(overrides)
    if overrides.get("reward.reward_family", "gap") != "gap" and not {"reward.charge", *_COST_OF.values()} & given:
        return {"reward.charge": "param", "reward.param_cost": None, "reward.compute_cost": None, **overrides}
    charge = overrides.get("reward.charge")
    if charge not in _COST_OF or charge == base.charge:
        return overrides
    own, other = _COST_OF[charge], _COST_OF[base.charge]
    fields: dict[str, Any] = {other: None}
    if not {own, other, "reward.type_param_costs"} & given:
        fields[own] = AUTO_COST if AUTO_COST in (base.param_cost, base.compute_cost) else None
    return {**fields, **overrides}


def family_fields(family: Family, base: RewardSetting, overrides: dict[str, Any]) -> dict[str, Any]:
    """A run across `family`, by dotted key: what it sets on top of a config whose reward is `base` (a preset's,
    after any --config-json) — the family, its first training type's task (the policy's action space, the same for
    every type), no sample cap of its own, and each type's own λ_p — then the user's `overrides`. The compute charge
    is measured per task only, so where `base` asks to measure λ_c (a reference preset) and the user names no other
    charge, or where the user names the parameter charge, the run charges parameters, each type's λ_p measured
    ("auto"); given `type_param_costs` replace that measurement. Any other charge is left for the check to refuse."""
    fields: dict[str, Any] = {"family": family.key, "episode.task": family_task(family, family.training[0]),
                              "episode.max_train_samples": None}
    named = overrides.get("reward.charge")
    if base.charge == "compute" and (named == "param" or (named is None and base.compute_cost == AUTO_COST)):
        fields |= {"reward.charge": "param", "reward.compute_cost": None, "reward.param_cost": AUTO_COST}
    if "reward.type_param_costs" in overrides and "reward.param_cost" not in overrides:
        fields["reward.param_cost"] = None
    return {**fields, **overrides}
