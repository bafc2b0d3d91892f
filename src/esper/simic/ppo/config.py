"""TrainingConfig: the single source of truth for a PPO run.

Every field reaches `train_ppo_vectorized`; unknown keys are rejected, so a typo in a JSON config is an error, not
a silently ignored knob. Precedence: preset → --config-json → CLI flags and --set KEY=VALUE.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from esper.env.rewards import RewardFamily, SparseRewardConfig
from esper.leyline import CANONICAL_SLOTS, ordered_slots
from esper.leyline.constants import (
    DEFAULT_BATCH_SIZE_TRAINING,
    DEFAULT_CLIP_RATIO,
    DEFAULT_ENTROPY_COEF,
    DEFAULT_ENTROPY_COEF_MIN,
    DEFAULT_EPISODE_LENGTH,
    DEFAULT_GAE_LAMBDA,
    DEFAULT_GAMMA,
    DEFAULT_HIDDEN_DIM,
    DEFAULT_LEARNING_RATE,
    DEFAULT_MAX_GRAD_NORM,
    DEFAULT_MINIBATCH_SIZE,
    DEFAULT_N_ENVS,
    DEFAULT_N_PPO_EPOCHS,
    DEFAULT_TARGET_KL,
    DEFAULT_VALUE_CLIP,
    DEFAULT_VALUE_COEF,
)
from esper.runtime.strict_config import StrictConfig
from esper.runtime.tasks import TASKS

_SPARSE_DEFAULTS = SparseRewardConfig()

_CPU_SYNTHETIC = {"task": "synthetic", "max_train_samples": 2048, "max_val_samples": 512, "n_epochs": 4,
                  "minibatch_size": 64}

PRESETS: dict[str, dict[str, Any]] = {
    # The README's main job: minutes on a laptop CPU, short episodes (`esper study --preset quick` evaluates it).
    "quick": {**_CPU_SYNTHETIC, "n_episodes": 16, "n_envs": 4, "max_epochs": 10, "minibatch_size": 32},
    # The CPU reference study: 25-epoch episodes of the embedded task.
    "synthetic": {**_CPU_SYNTHETIC, "n_episodes": 96, "n_envs": 8, "max_epochs": 25},
    # Real data (Debian's dataset-fashion-mnist or --data-dir); sample caps keep it within CPU reach.
    "fashion_mnist": {"task": "fashion_mnist", "max_train_samples": 8192, "max_val_samples": 2000, "n_epochs": 4,
                      "n_episodes": 96, "n_envs": 8, "max_epochs": 25},
    "cifar10": {"task": "cifar10", "entropy_coef": 0.1},
    "cifar10_deep": {"task": "cifar10_deep", "entropy_coef": 0.08},
    "tinystories": {"task": "tinystories", "batch_size": 32, "entropy_anneal_episodes": 40},
}


class TrainingConfig(StrictConfig):
    """Every setting of one PPO run; a checkpoint stores it, so it rebuilds the agent and checks resumes."""

    task: str = "cifar10"
    slots: list[str] = Field(default_factory=lambda: list(CANONICAL_SLOTS))
    max_seeds: int | None = None
    max_epochs: int = DEFAULT_EPISODE_LENGTH
    batch_size: int = DEFAULT_BATCH_SIZE_TRAINING
    max_train_samples: int | None = None
    max_val_samples: int | None = None
    n_episodes: int = 200
    n_envs: int = DEFAULT_N_ENVS
    seed: int = 42
    device: str = "auto"
    devices: list[str] | None = None
    amp: bool = False
    checkpoint_every: int = 1  # every rollout batch: a killed run loses at most the batch in flight
    lr: float = DEFAULT_LEARNING_RATE
    gamma: float = DEFAULT_GAMMA
    gae_lambda: float = DEFAULT_GAE_LAMBDA
    clip_ratio: float = DEFAULT_CLIP_RATIO
    value_coef: float = DEFAULT_VALUE_COEF
    value_clip: float | None = DEFAULT_VALUE_CLIP
    max_grad_norm: float = DEFAULT_MAX_GRAD_NORM
    n_epochs: int = DEFAULT_N_PPO_EPOCHS
    minibatch_size: int = DEFAULT_MINIBATCH_SIZE
    target_kl: float | None = DEFAULT_TARGET_KL
    ppo_updates_per_batch: int = 1
    entropy_coef: float = DEFAULT_ENTROPY_COEF
    entropy_coef_min: float = DEFAULT_ENTROPY_COEF_MIN
    entropy_anneal_episodes: int = 0
    hidden_dim: int = DEFAULT_HIDDEN_DIM
    use_telemetry: bool = True
    reward_family: RewardFamily = RewardFamily.GAP
    param_cost: float | None = None  # gap reward's λ_p; None: the task's measured value
    group_size: int = 4  # envs sharing one host seed and one static twin
    advantage: Literal["gae", "group"] = "gae"
    param_budget: int = _SPARSE_DEFAULTS.param_budget
    param_penalty_weight: float = _SPARSE_DEFAULTS.param_penalty_weight
    sparse_reward_scale: float = _SPARSE_DEFAULTS.sparse_reward_scale

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        if v.lower() not in TASKS:
            raise ValueError(f"unknown task '{v}'. Available: {sorted(TASKS)}")
        return v.lower()

    @field_validator("slots")
    @classmethod
    def _slots(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one slot must be enabled")
        return list(ordered_slots(v))

    @field_validator("max_seeds", "max_train_samples", "max_val_samples")
    @classmethod
    def _optional_positive(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError("must be >= 1 or null")
        return v

    @field_validator("batch_size", "n_episodes", "n_envs", "checkpoint_every", "n_epochs", "minibatch_size",
                     "ppo_updates_per_batch", "group_size")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be >= 1")
        return v

    @field_validator("max_epochs")
    @classmethod
    def _max_epochs(cls, v: int) -> int:
        if v < 2:
            raise ValueError("must be >= 2")
        return v

    @field_validator("hidden_dim")
    @classmethod
    def _hidden(cls, v: int) -> int:
        if v < 8 or v % 2:
            raise ValueError("must be an even number >= 8")
        return v

    @model_validator(mode="after")
    def _consistency(self) -> TrainingConfig:
        checks = [
            (self.lr > 0, "lr must be > 0"),
            (0 < self.gamma <= 1, "gamma must be in (0, 1]"),
            (0 <= self.gae_lambda <= 1, "gae_lambda must be in [0, 1]"),
            (self.clip_ratio > 0, "clip_ratio must be > 0"),
            (self.value_clip is None or self.value_clip > 0, "value_clip must be > 0 or null"),
            (self.target_kl is None or self.target_kl > 0, "target_kl must be > 0 or null"),
            (0 <= self.entropy_coef_min <= self.entropy_coef, "need 0 <= entropy_coef_min <= entropy_coef"),
            (self.entropy_anneal_episodes >= 0, "entropy_anneal_episodes must be >= 0"),
            (self.devices is None or self.n_envs >= len(self.devices), "n_envs must be >= the number of devices"),
            (self.n_envs % self.group_size == 0, "n_envs must be a multiple of group_size"),
            (self.n_episodes % self.group_size == 0, "n_episodes must be a multiple of group_size"),
            (self.advantage != "group" or self.group_size > 1, "the group advantage needs group_size >= 2"),
            (self.param_cost is None or self.param_cost >= 0, "param_cost must be >= 0 or null"),
            (self.reward_family == RewardFamily.GAP or self.param_cost is None,
             "param_cost only applies to reward_family 'gap'"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        if self.reward_family != RewardFamily.SPARSE:
            changed = [k for k in ("param_budget", "param_penalty_weight", "sparse_reward_scale")
                       if getattr(self, k) != getattr(_SPARSE_DEFAULTS, k)]
            if changed:
                raise ValueError(f"{changed} only apply to reward_family 'sparse' (got '{self.reward_family.value}')")
        return self

    # ------------------------------------------------------------------ construction

    @classmethod
    def preset(cls, name: str) -> TrainingConfig:
        if name not in PRESETS:
            raise ValueError(f"Unknown preset '{name}'. Available: {sorted(PRESETS)}")
        return cls(**PRESETS[name])
