"""TrainingConfig: the single source of truth for a PPO run.

Every field reaches `train_ppo`; unknown keys are rejected, so a typo in a JSON config is an error, not
a silently ignored knob. Precedence: preset → --config-json → CLI flags and --set KEY=VALUE.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import Field, StrictInt, ValidationInfo, field_validator, model_validator

from esper.env.rewards import AUTO_PARAM_COST, RewardFamily, SparseRewardConfig
from esper.leyline import CANONICAL_SLOTS, LifecycleOp, ordered_slots
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
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import MAX_BASE_SEED
from esper.runtime.optim import LRSchedule
from esper.runtime.strict_config import StrictConfig
from esper.runtime.tasks import get_task_spec
from esper.runtime.workers import Executor, WorkerOptions, cuda_device_count

_SPARSE_DEFAULTS = SparseRewardConfig()

_TRAINING_RUN = {"max_train_samples": 1024, "max_val_samples": 512, "batch_size": 64, "max_epochs": 30,
                 "lr_schedule": "cosine", "param_cost": AUTO_PARAM_COST, "n_episodes": 96, "n_envs": 8, "n_epochs": 4,
                 "minibatch_size": 64}

PRESETS: dict[str, dict[str, Any]] = {
    # A workflow demo, not a result: minutes on a laptop CPU, 10-epoch episodes in which no seed can finish its
    # lifecycle (`esper study --preset quick` evaluates it end to end).
    "quick": {"task": "synthetic", "max_train_samples": 2048, "max_val_samples": 512, "n_epochs": 4,
              "minibatch_size": 32, "n_episodes": 16, "n_envs": 4, "max_epochs": 10},
    # The CPU reference studies. An episode is a training run: 30 epochs on 1,024 / 512 samples at batch 64 (480
    # optimizer steps) with learning rates annealed by a cosine, so the static host ends converged (its validation
    # accuracy flat over the last 20 % of epochs) at the accuracy 60 epochs of a constant rate reach, for half the
    # compute. λ_p is measured in exactly this setting before training (and cached). 96 episodes per training run
    # keep a study of 5 runs with every baseline within about 3 hours of a 2-core machine (README: the trade).
    "synthetic": {**_TRAINING_RUN, "task": "synthetic"},
    # Real data (Debian's dataset-fashion-mnist or --data-dir), the same regime.
    "fashion_mnist": {**_TRAINING_RUN, "task": "fashion_mnist"},
    "cifar10": {"task": "cifar10", "entropy_coef": 0.1},
    "cifar10_deep": {"task": "cifar10_deep", "entropy_coef": 0.08},
    "tinystories": {"task": "tinystories", "batch_size": 32, "entropy_anneal_episodes": 40},
}


MAX_ENVS = 256
MAX_EPISODE_LENGTH = 1000
MAX_EPISODES = 1_000_000
MAX_SAMPLES = 10**9
MAX_BATCH = 65_536
MAX_OP_BIAS = 20.0

# Numeric fields: (lowest, highest, lowest excluded). Limits catch typos and values that would exhaust memory or
# overflow a seed (hidden_dim 10**6 asks for terabytes) long before any work starts, and every float must be finite.
BOUNDS: dict[str, tuple[float, float, bool]] = {
    "max_seeds": (1, len(CANONICAL_SLOTS), False),
    "max_epochs": (2, MAX_EPISODE_LENGTH, False),
    "batch_size": (1, MAX_BATCH, False),
    "max_train_samples": (1, MAX_SAMPLES, False),
    "max_val_samples": (1, MAX_SAMPLES, False),
    "n_episodes": (1, MAX_EPISODES, False),
    "n_envs": (1, MAX_ENVS, False),
    "seed": (0, MAX_BASE_SEED, False),
    "checkpoint_every": (1, MAX_EPISODES, False),
    "lr": (0.0, 1.0, True),
    "gamma": (0.0, 1.0, True),
    "gae_lambda": (0.0, 1.0, False),
    "clip_ratio": (0.0, 10.0, True),
    "value_coef": (0.0, 1000.0, False),
    "value_clip": (0.0, 1e6, True),
    "max_grad_norm": (0.0, 1e6, True),
    "n_epochs": (1, 1000, False),
    "minibatch_size": (1, MAX_BATCH, False),
    "target_kl": (0.0, 100.0, True),
    "ppo_updates_per_batch": (1, 100, False),
    "entropy_coef": (0.0, 100.0, False),
    "entropy_coef_min": (0.0, 100.0, False),
    "entropy_anneal_episodes": (0, MAX_EPISODES, False),
    "hidden_dim": (8, 4096, False),
    "param_cost": (0.0, 1e6, False),
    "group_size": (1, MAX_ENVS, False),
    "param_budget": (1, 10**12, False),
    "param_penalty_weight": (0.0, 1e6, False),
    "sparse_reward_scale": (0.0, 1e6, True),
}


class TrainingConfig(StrictConfig):
    """Every setting of one PPO run; a checkpoint stores it, so it rebuilds the agent and checks resumes."""

    task: str = "cifar10"
    slots: list[str] = Field(default_factory=lambda: list(CANONICAL_SLOTS))
    max_seeds: int | None = None
    max_epochs: int = DEFAULT_EPISODE_LENGTH
    batch_size: int = DEFAULT_BATCH_SIZE_TRAINING
    lr_schedule: LRSchedule = "constant"  # the episode's host and seed learning rates per epoch ("cosine": annealed)
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
    # The op head's initial bias per op name (others 0): the initial policy's log-odds between WAIT, GERMINATE, CULL
    # and FOSSILIZE. {"CULL": -2} starts from a policy that rarely culls, so random seeds live through their lifecycle
    # and exploration sees what fossilized modules are worth.
    initial_op_bias: dict[str, float] = Field(default_factory=dict)
    # The blueprints the policy may germinate (None: every blueprint of the task's topology). The restriction is the
    # policy's, not the env's: the other controllers of a comparison keep every blueprint.
    blueprints: list[str] | None = None
    use_telemetry: bool = True
    reward_family: RewardFamily = RewardFamily.GAP
    # gap reward's λ_p; None: the task's value measured at the nearest sample cap; "auto": measured for this run's
    # setting by the command line (and cached) before training starts
    param_cost: float | Literal["auto"] | None = None
    group_size: int = 4  # envs sharing one host seed and one static twin
    advantage: Literal["gae", "group"] = "gae"
    init_from: str | None = None  # "iql:PATH": distill that IQL policy into the actor before the first update
    init_datasets: list[str] | None = None  # the datagen directories to distill on (default: the IQL run's)
    param_budget: int = _SPARSE_DEFAULTS.param_budget
    param_penalty_weight: float = _SPARSE_DEFAULTS.param_penalty_weight
    sparse_reward_scale: float = _SPARSE_DEFAULTS.sparse_reward_scale
    # Where the env groups run (WorkerOptions checks them): `workers` processes or Ray actors (0: all in this
    # process); `threads`: intra-op threads of every process of the run (its floats depend on it; placement does not)
    workers: StrictInt = 0
    threads: StrictInt = 1
    executor: Executor = "process"
    ray_address: str | None = None  # an existing Ray cluster (default: a local one started for the run)

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        return get_task_spec(v).name

    @field_validator("slots")
    @classmethod
    def _slots(cls, v: list[str]) -> list[str]:
        if not v:
            raise UserInputError("at least one slot must be enabled")
        return list(ordered_slots(v))

    @model_validator(mode="before")
    @classmethod
    def _no_bools_as_numbers(cls, data: Any) -> Any:
        """JSON `true` is not the number 1: a boolean given for a numeric field is a typo, not a value."""
        if isinstance(data, dict):
            for key, value in data.items():
                if isinstance(value, bool) and key in BOUNDS:
                    raise UserInputError(f"{key}: expected a number, got {json.dumps(value)}")
        return data

    @field_validator(*BOUNDS)
    @classmethod
    def _in_bounds(cls, v: float | str | None, info: ValidationInfo) -> float | str | None:
        if v is None or v == AUTO_PARAM_COST:
            return v
        if isinstance(v, str):
            raise UserInputError(f"expected a number (or '{AUTO_PARAM_COST}' for param_cost), got {v!r}")
        lo, hi, low_open = BOUNDS[str(info.field_name)]
        if not math.isfinite(v) or (v <= lo if low_open else v < lo) or v > hi:
            if isinstance(v, int):
                raise UserInputError(f"must be an integer in [{lo:g}, {hi:g}], got {v}")
            low = f"> {lo:g}" if low_open else f">= {lo:g}"
            raise UserInputError(f"must be a finite number {low} and <= {hi:g}, got {v}")
        return v

    @field_validator("initial_op_bias")
    @classmethod
    def _op_bias(cls, v: dict[str, float]) -> dict[str, float]:
        ops = [op.name for op in LifecycleOp]
        unknown = sorted(set(v) - set(ops))
        if unknown:
            raise UserInputError(f"unknown op(s) {unknown}; initial_op_bias is keyed by {ops}")
        bad = {k: x for k, x in v.items() if not math.isfinite(x) or abs(x) > MAX_OP_BIAS}
        if bad:
            raise UserInputError(f"op biases must be finite and within ±{MAX_OP_BIAS:g} (log-odds), got {bad}")
        return v

    def op_bias(self) -> tuple[float, ...]:
        """`initial_op_bias` as one value per op in `LifecycleOp` order; () when none is set (a zero bias)."""
        return tuple(self.initial_op_bias.get(op.name, 0.0) for op in LifecycleOp) if self.initial_op_bias else ()

    @field_validator("hidden_dim")
    @classmethod
    def _hidden(cls, v: int) -> int:
        if v % 2:
            raise UserInputError("must be an even number")
        return v

    @model_validator(mode="after")
    def _consistency(self) -> TrainingConfig:
        checks = [
            (0 <= self.entropy_coef_min <= self.entropy_coef, "need 0 <= entropy_coef_min <= entropy_coef"),
            (self.devices is None or self.n_envs >= len(self.devices), "n_envs must be >= the number of devices"),
            (self.n_envs % self.group_size == 0, "n_envs must be a multiple of group_size"),
            (self.n_episodes % self.group_size == 0, "n_episodes must be a multiple of group_size"),
            (self.advantage != "group" or self.group_size > 1, "the group advantage needs group_size >= 2"),
            (self.reward_family == RewardFamily.GAP or self.param_cost is None,
             "param_cost only applies to reward_family 'gap'"),
            (self.init_from is None or (self.init_from.startswith("iql:") and len(self.init_from) > 4),
             "init_from must be 'iql:PATH' (an IQL checkpoint or run directory)"),
            (self.init_datasets is None or (self.init_from is not None and len(self.init_datasets) > 0),
             "init_datasets needs init_from and at least one directory"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserInputError(message)
        self.blueprint_indices()
        self.worker_options()
        if self.reward_family != RewardFamily.SPARSE:
            changed = [k for k in ("param_budget", "param_penalty_weight", "sparse_reward_scale")
                       if getattr(self, k) != getattr(_SPARSE_DEFAULTS, k)]
            if changed:
                raise UserInputError(f"{changed} only apply to reward_family 'sparse' "
                                     f"(got '{self.reward_family.value}')")
        return self

    def blueprint_indices(self) -> frozenset[int] | None:
        """`blueprints` as indices of the topology's blueprint head (None: all of them); unknown names are refused."""
        if self.blueprints is None:
            return None
        head = get_task_spec(self.task).action_space.head
        germinable = head[1:]  # index 0 is the noop blueprint, never a germination
        unknown = sorted(set(self.blueprints) - set(germinable))
        if unknown or not self.blueprints:
            raise UserInputError(f"blueprints must name at least one of {list(germinable)} (task {self.task}), got "
                                 f"{self.blueprints}")
        return frozenset(head.index(b) for b in self.blueprints)

    def charged_param_cost(self) -> float | None:
        """The λ_p the reward charges (None: the task's measured one). "auto" is measured by the command line
        (`esper train ppo`, `esper study`) before training, so a config that still says "auto" here is refused."""
        if isinstance(self.param_cost, str):  # AUTO_PARAM_COST, the one string the field accepts
            raise UserInputError("param_cost 'auto' is measured by `esper train ppo` and `esper study` before training;"
                                 " from Python, measure it with esper.evaluation.param_cost.cached_param_cost and pass "
                                 "the number")
        return self.param_cost

    def worker_options(self) -> WorkerOptions:
        """Where the env groups run (Ray actors sharing the env devices' GPUs). Placement only: any number of
        workers computes the same run."""
        return WorkerOptions(self.workers, self.executor, self.ray_address, self.threads,
                             cuda_device_count(self.devices or [self.device]))

    # ------------------------------------------------------------------ construction

    @classmethod
    def preset(cls, name: str) -> TrainingConfig:
        if name not in PRESETS:
            raise UserInputError(f"Unknown preset '{name}'. Available: {sorted(PRESETS)}")
        return cls(**PRESETS[name])
