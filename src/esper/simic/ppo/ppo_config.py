"""`PPOConfig`: the policy and how PPO learns it — all that `PPOAgent` receives.

The rollout (envs per batch, episodes, groups), the update (clip, value loss, epochs, minibatches, target KL, the
entropy schedule), the network (width, initial op bias, which blueprints it may germinate, whether it sees the seeds'
telemetry) and how it starts: from scratch, distilled from an IQL policy, or as a residual policy on a teacher.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, StrictFloat, StrictInt, field_validator, model_validator

from esper.data.tasks import get_task_spec
from esper.leyline import LifecycleOp
from esper.leyline.constants import (
    DEFAULT_CLIP_RATIO,
    DEFAULT_ENTROPY_COEF,
    DEFAULT_ENTROPY_COEF_MIN,
    DEFAULT_GAE_LAMBDA,
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
from esper.leyline.errors import UserInputError, did_you_mean
from esper.leyline.strict_config import BatchSize, StrictConfig
from esper.simic.ppo.teacher import NO_TEACHER, check_teacher_spec

__all__ = ["MAX_ENVS", "MAX_EPISODES", "PPOConfig"]

MAX_ENVS = 256
MAX_EPISODES = 1_000_000
MAX_OP_BIAS = 20.0

# Every number has a range: limits catch typos and values that would exhaust memory or overflow a seed (hidden_dim
# 10**6 asks for terabytes) long before any work starts. Strict types refuse a bool for a number (JSON `true` is a
# typo, not 1), and the base config refuses non-finite floats.
Envs = Annotated[StrictInt, Field(ge=1, le=MAX_ENVS)]
Episodes = Annotated[StrictInt, Field(ge=1, le=MAX_EPISODES)]
Coef = Annotated[StrictFloat, Field(ge=0.0, le=100.0)]
Positive = Annotated[StrictFloat, Field(gt=0.0, le=1e6)]
OpBias = Annotated[StrictFloat, Field(ge=-MAX_OP_BIAS, le=MAX_OP_BIAS)]

# How a residual policy starts: the defaults of the fields that only a policy with a teacher reads.
_TEACHER_EPSILON, _CRITIC_WARMUP_BATCHES, _ACTOR_WARMUP_UPDATES = 0.1, 1, 4
_TEACHER_KL_START, _TEACHER_KL_END = 0.1, 0.01
_RESIDUAL: Mapping[str, float] = MappingProxyType({
    "teacher_epsilon": _TEACHER_EPSILON, "critic_warmup_batches": _CRITIC_WARMUP_BATCHES,
    "actor_warmup_updates": _ACTOR_WARMUP_UPDATES, "teacher_kl_start": _TEACHER_KL_START,
    "teacher_kl_end": _TEACHER_KL_END})


class PPOConfig(StrictConfig):
    """The PPO policy and its learning: everything `PPOAgent` reads, and how the training loop drives it (rollout
    batches of `n_envs` episodes in groups of `group_size`, GAE or group advantages, the initial actor)."""

    KIND: ClassVar[str] = "PPO config"
    n_episodes: Episodes = Field(default=200, description="episodes to train for, in all")
    n_envs: Envs = Field(default=DEFAULT_N_ENVS, description="envs per rollout batch")
    lr: StrictFloat = Field(default=DEFAULT_LEARNING_RATE, gt=0.0, le=1.0, description="policy learning rate")
    gae_lambda: StrictFloat = Field(default=DEFAULT_GAE_LAMBDA, ge=0.0, le=1.0, description="GAE λ")
    clip_ratio: StrictFloat = Field(default=DEFAULT_CLIP_RATIO, gt=0.0, le=10.0, description="PPO ratio clip")
    value_coef: StrictFloat = Field(default=DEFAULT_VALUE_COEF, ge=0.0, le=1000.0, description="value loss weight")
    value_clip: Positive | None = Field(default=DEFAULT_VALUE_CLIP,
                                        description="value prediction clip (--set value_clip=null: none)")
    max_grad_norm: Positive = Field(default=DEFAULT_MAX_GRAD_NORM, description="gradient norm clip")
    n_epochs: StrictInt = Field(default=DEFAULT_N_PPO_EPOCHS, ge=1, le=1000,
                                description="PPO epochs per update: passes over the rollout in fresh minibatches")
    minibatch_size: BatchSize = Field(default=DEFAULT_MINIBATCH_SIZE, description="PPO minibatch size")
    target_kl: StrictFloat | None = Field(default=DEFAULT_TARGET_KL, gt=0.0, le=100.0,
                                          description="stop an update's epochs past this KL (--set target_kl=null: "
                                                      "never)")
    # Not n_epochs in other words: the entropy, actor warm-up and teacher-KL schedules step once per update and each
    # update reads them afresh, so k updates of E epochs are k·E epochs with the schedules stepped k times a batch.
    ppo_updates_per_batch: StrictInt = Field(default=1, ge=1, le=100,
                                             description="PPO updates per rollout batch, each of n_epochs epochs; the "
                                                         "entropy, actor warm-up and teacher-KL schedules step once "
                                                         "per update")
    entropy_coef: Coef = Field(default=DEFAULT_ENTROPY_COEF, description="entropy bonus weight")
    entropy_coef_min: Coef = Field(default=DEFAULT_ENTROPY_COEF_MIN, description="the entropy weight annealing ends at")
    entropy_anneal_episodes: StrictInt = Field(default=0, ge=0, le=MAX_EPISODES,
                                               description="episodes to anneal the entropy weight over (0: constant)")
    hidden_dim: StrictInt = Field(default=DEFAULT_HIDDEN_DIM, ge=8, le=4096, description="policy width (even)")
    initial_op_bias: dict[str, OpBias] = Field(default_factory=dict,
                                               description="the op head's initial bias per op name, log-odds (others "
                                                           "0), e.g. '{\"CULL\": -2}': a policy that starts rarely "
                                                           "culling lets random seeds live through their lifecycle")
    blueprints: list[str] | None = Field(default=None,
                                         description="the blueprints the policy may germinate (default: every "
                                                     "blueprint of the task's topology; the other controllers of a "
                                                     "comparison keep every one)")
    use_telemetry: bool = Field(default=True, description="feed the seeds' telemetry to the policy")
    group_size: Envs = Field(default=4, description="envs sharing one host seed and one static twin")
    advantage: Literal["gae", "group"] = Field(default="gae", description="advantage estimator")
    init_from: str | None = Field(default=None,
                                  description="'iql:PATH': distill that IQL policy into the actor before the first "
                                              "update")
    init_datasets: list[str] | None = Field(default=None,
                                            description="the datagen directories to distill on (default: the IQL "
                                                        "run's)")
    teacher: str = Field(default=NO_TEACHER,
                         description="the controller a residual policy starts from and learns on top of "
                                     "(heuristic[:...], grow:..., behavior:...); 'none': a policy learned from scratch")
    teacher_epsilon: StrictFloat = Field(default=_TEACHER_EPSILON, ge=0.0, lt=1.0,
                                         description="with a teacher: the share of uniform over the legal actions "
                                                     "its choice is smoothed with (the exploration around it)")
    critic_warmup_batches: StrictInt = Field(default=_CRITIC_WARMUP_BATCHES, ge=0, le=MAX_EPISODES,
                                             description="with a teacher: rollout batches (n_envs episodes each) of "
                                                         "the initial (teacher-like) policy whose returns fit the "
                                                         "critic before the actor moves, on top of n_episodes")
    actor_warmup_updates: StrictInt = Field(default=_ACTOR_WARMUP_UPDATES, ge=0, le=MAX_EPISODES,
                                            description="with a teacher: actor updates over which its learning rate "
                                                        "rises linearly to lr")
    teacher_kl_start: Coef = Field(default=_TEACHER_KL_START,
                                   description="with a teacher: the weight of KL(policy ‖ teacher) at the first "
                                               "actor update, annealed linearly to teacher_kl_end at the last")
    teacher_kl_end: Coef = Field(default=_TEACHER_KL_END,
                                 description="with a teacher: the KL weight at the last actor update")

    @field_validator("hidden_dim")
    @classmethod
    def _hidden(cls, v: int) -> int:
        if v % 2:
            raise UserInputError("must be an even number")
        return v

    @field_validator("initial_op_bias")
    @classmethod
    def _op_bias(cls, v: dict[str, float]) -> dict[str, float]:
        ops = [op.name for op in LifecycleOp]
        unknown = sorted(set(v) - set(ops))
        if unknown:
            raise UserInputError(f"unknown op(s) {unknown}; initial_op_bias is keyed by {ops}")
        return v

    @field_validator("teacher")
    @classmethod
    def _teacher(cls, v: str) -> str:
        return check_teacher_spec(v)

    @model_validator(mode="after")
    def _consistency(self) -> Self:
        checks = [
            (0 <= self.entropy_coef_min <= self.entropy_coef, "need 0 <= entropy_coef_min <= entropy_coef"),
            (self.n_envs % self.group_size == 0, "n_envs must be a multiple of group_size"),
            (self.n_episodes % self.group_size == 0, "n_episodes must be a multiple of group_size"),
            (self.advantage != "group" or self.group_size > 1, "the group advantage needs group_size >= 2"),
            (self.init_from is None or (self.init_from.startswith("iql:") and len(self.init_from) > 4),
             "init_from must be 'iql:PATH' (an IQL checkpoint or run directory)"),
            (self.init_datasets is None or (self.init_from is not None and len(self.init_datasets) > 0),
             "init_datasets needs init_from and at least one directory"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserInputError(message)
        self._check_teacher()
        return self

    def _check_teacher(self) -> None:
        """A residual policy starts as its teacher: nothing else may set its initial actor, and its start-up fields
        are knobs of a residual policy only."""
        if self.teacher == NO_TEACHER:
            changed = [k for k, default in _RESIDUAL.items() if getattr(self, k) != default]
            if changed:
                raise UserInputError(f"{changed} only apply to a residual policy: set teacher (e.g. --set "
                                     f"teacher=heuristic) or drop them")
            return
        checks = [
            (self.init_from is None, f"a residual policy starts as its teacher ({self.teacher}): drop init_from"),
            (not self.initial_op_bias, f"a residual policy starts as its teacher ({self.teacher}): drop "
                                       f"initial_op_bias"),
            (self.advantage == "gae" or self.critic_warmup_batches == 0,
             "the group advantage uses no critic: set critic_warmup_batches=0 or advantage=gae"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserInputError(message)

    def op_bias(self) -> tuple[float, ...]:
        """`initial_op_bias` as one value per op in `LifecycleOp` order; () when none is set (a zero bias)."""
        return tuple(self.initial_op_bias.get(op.name, 0.0) for op in LifecycleOp) if self.initial_op_bias else ()

    def residual_epsilon(self) -> float | None:
        """The teacher's smoothing ε of a residual policy; None for a policy learned from scratch."""
        return None if self.teacher == NO_TEACHER else self.teacher_epsilon

    def warmup_batches(self) -> int:
        """Rollout batches of the critic warm-up, run before the `n_episodes` the actor learns from (0 without a
        teacher)."""
        return 0 if self.teacher == NO_TEACHER else self.critic_warmup_batches

    def total_episodes(self) -> int:
        """Every episode the run trains on: the critic warm-up's, then `n_episodes`."""
        return self.warmup_batches() * self.n_envs + self.n_episodes

    def blueprint_indices(self, task: str) -> frozenset[int] | None:
        """`blueprints` as indices of `task`'s blueprint head (None: all of them); unknown names are refused."""
        if self.blueprints is None:
            return None
        head = get_task_spec(task).action_space.head
        germinable = head[1:]  # index 0 is the noop blueprint, never a germination
        unknown = sorted(set(self.blueprints) - set(germinable))
        if unknown or not self.blueprints:
            hint = "".join(did_you_mean(name, germinable) for name in unknown)
            raise UserInputError(f"blueprints must name at least one of {list(germinable)} (task {task}), got "
                                 f"{self.blueprints}{hint}")
        return frozenset(head.index(b) for b in self.blueprints)
