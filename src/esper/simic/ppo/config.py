"""TrainingConfig: the single source of truth for a PPO run.

Every field reaches `train_ppo`; unknown keys are rejected, so a typo in a JSON config is an error, not
a silently ignored knob. Precedence: preset → --config-json → CLI flags and --set KEY=VALUE.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import Field, StrictFloat, StrictInt, field_validator, model_validator

from esper.data.augment import AugmentChoice
from esper.data.families import Family, family_task, get_family
from esper.data.optim import LRSchedule
from esper.data.tasks import get_task_spec
from esper.env.charges import (
    AUTO_COST,
    Charge,
    ComputeCostOrAuto,
    ParamCost,
    ParamCostOrAuto,
    charged_cost,
)
from esper.env.rewards import RewardFamily, SparseRewardConfig
from esper.execution.workers import Executor, Threads, WorkerOptions, Workers, cuda_device_count, placement_problem
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
    MAX_PARAM_BUDGET,
    MAX_WEIGHT,
)
from esper.leyline.errors import UserInputError, did_you_mean
from esper.leyline.seeding import MAX_BASE_SEED
from esper.leyline.strict_config import BatchSize, EpisodeLength, SampleCap, StrictConfig
from esper.simic.ppo.teacher import NO_TEACHER, check_teacher_spec

_SPARSE_DEFAULTS = SparseRewardConfig()

# How a residual policy starts: the defaults of the fields that only a policy with a teacher reads.
_TEACHER_EPSILON, _CRITIC_WARMUP_BATCHES, _ACTOR_WARMUP_UPDATES = 0.1, 1, 4
_TEACHER_KL_START, _TEACHER_KL_END = 0.1, 0.01
_RESIDUAL: Mapping[str, float] = MappingProxyType({
    "teacher_epsilon": _TEACHER_EPSILON, "critic_warmup_batches": _CRITIC_WARMUP_BATCHES,
    "actor_warmup_updates": _ACTOR_WARMUP_UPDATES, "teacher_kl_start": _TEACHER_KL_START,
    "teacher_kl_end": _TEACHER_KL_END})

# γ = 1: the gap reward's undiscounted return telescopes to exactly the objective the study reports (the final gap
# to the static twin net of the charge); a discount would weigh the early epochs' changes of the gap above the late
# ones' and make the policy optimize something else.
_TRAINING_RUN = {"max_train_samples": 1024, "max_val_samples": 512, "batch_size": 64, "max_epochs": 30,
                 "lr_schedule": "cosine", "param_cost": AUTO_COST, "gamma": 1.0, "n_episodes": 96, "n_envs": 8,
                 "n_epochs": 4, "minibatch_size": 64}

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


class TrainingConfig(StrictConfig):
    """Every setting of one PPO run; a checkpoint stores it, so it rebuilds the agent and checks resumes.

    A field added later must default to what the code did before it existed: a study phase recorded without the
    field is then still the setting it names, and is continued rather than rerun."""

    task: str = Field(default="cifar10", description="the task the envs train on")
    slots: list[str] = Field(default_factory=lambda: list(CANONICAL_SLOTS),
                             description=f"the slots seeds may germinate in (of {', '.join(CANONICAL_SLOTS)})")
    max_seeds: StrictInt | None = Field(default=None, ge=1, le=len(CANONICAL_SLOTS),
                                        description="seed budget per episode (default: one per enabled slot)")
    max_epochs: EpisodeLength = Field(default=DEFAULT_EPISODE_LENGTH,
                                      description="episode length; decisions follow epochs 1 .. T-1")
    batch_size: BatchSize = Field(default=DEFAULT_BATCH_SIZE_TRAINING, description="the envs' training batch size")
    lr_schedule: LRSchedule = Field(default="constant",
                                    description="the episode's host and seed learning rates per epoch (cosine: "
                                                "annealed to 0 over the episode)")
    augment: AugmentChoice | None = Field(default=None,
                                          description="the training batches' augmentation: none, crop, flip or "
                                                      "crop,flip (default: the task's own)")
    max_train_samples: SampleCap | None = Field(default=None,
                                              description="train each episode on a subset of the train split "
                                                          "(default: all of it)")
    max_val_samples: SampleCap | None = Field(default=None,
                                            description="validate on a subset of the val split (default: all of it)")
    n_episodes: Episodes = Field(default=200, description="episodes to train for, in all")
    n_envs: Envs = Field(default=DEFAULT_N_ENVS, description="envs per rollout batch")
    seed: StrictInt = Field(default=42, ge=0, le=MAX_BASE_SEED,
                            description="base seed of every random stream of the run")
    device: str = Field(default="auto", description="policy device: 'auto', 'cpu' or 'cuda:N'")
    devices: list[str] | None = Field(default=None, description="env devices, round-robin (default: --device)")
    amp: bool = Field(default=False, description="mixed precision (fp16 + GradScaler on CUDA, bf16 on CPU)")
    checkpoint_every: Episodes = Field(default=1,
                                       description="rollout batches between checkpoints (1: a killed run loses at "
                                                   "most the batch in flight)")
    lr: StrictFloat = Field(default=DEFAULT_LEARNING_RATE, gt=0.0, le=1.0, description="policy learning rate")
    gamma: StrictFloat = Field(default=DEFAULT_GAMMA, gt=0.0, le=1.0, description="discount")
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
    reward_family: RewardFamily = Field(default=RewardFamily.GAP, description="the reward the policy learns from")
    param_cost: ParamCostOrAuto | None = Field(default=None,
                                               description="gap reward's λ_p, pp per 100 % of added parameters; "
                                                           "'auto': measured for this run's setting before training "
                                                           "(and cached); none: the task's, measured at the nearest "
                                                           "sample cap")
    charge: Charge = Field(default="param",
                           description="what the gap reward charges growth: 'param', λ_p per 100 % of added "
                                       "parameters (and a small cost per intervention), or 'compute', λ_c per 100 % "
                                       "more training compute than the static twin (the return is then accuracy "
                                       "above the static frontier at equal training compute)")
    compute_cost: ComputeCostOrAuto | None = Field(default=None,
                                                   description="with charge 'compute': gap reward's λ_c, pp per 100 % "
                                                               "more training compute; 'auto': measured for this "
                                                               "run's setting before training (and cached); none: "
                                                               "the task's, measured at the nearest sample cap")
    family: str | None = Field(default=None,
                               description="train across this task family's training types (its key, e.g. "
                                           "synthetic-shift-v1): each env group trains on the type its data seed "
                                           "draws, never a held-out one")
    type_param_costs: dict[str, ParamCost] | None = Field(default=None,
                                                          description="with family and the gap reward: λ_p per "
                                                                      "training type, type name → pp per 100 % of "
                                                                      "added parameters (param_cost 'auto' measures "
                                                                      "them)")
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
    param_budget: StrictInt = Field(default=_SPARSE_DEFAULTS.param_budget, ge=1, le=MAX_PARAM_BUDGET,
                                    description="sparse reward's parameter budget")
    param_penalty_weight: StrictFloat = Field(default=_SPARSE_DEFAULTS.param_penalty_weight, ge=0.0, le=MAX_WEIGHT,
                                              description="sparse reward's weight of parameters over the budget")
    sparse_reward_scale: Positive = Field(default=_SPARSE_DEFAULTS.sparse_reward_scale,
                                          description="sparse reward's scale")
    workers: Workers = Field(default=0, description="worker processes (or Ray actors) the env groups spread over; 0: "
                                                    "all in this process")
    threads: Threads = Field(default=1, description="intra-op threads of every process of the run (its floats depend "
                                                    "on it; placement does not)")
    executor: Executor = Field(default="process", description="where workers run: local processes or Ray actors")
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

    @field_validator("initial_op_bias")
    @classmethod
    def _op_bias(cls, v: dict[str, float]) -> dict[str, float]:
        ops = [op.name for op in LifecycleOp]
        unknown = sorted(set(v) - set(ops))
        if unknown:
            raise UserInputError(f"unknown op(s) {unknown}; initial_op_bias is keyed by {ops}")
        return v

    def op_bias(self) -> tuple[float, ...]:
        """`initial_op_bias` as one value per op in `LifecycleOp` order; () when none is set (a zero bias)."""
        return tuple(self.initial_op_bias.get(op.name, 0.0) for op in LifecycleOp) if self.initial_op_bias else ()

    @field_validator("teacher")
    @classmethod
    def _teacher(cls, v: str) -> str:
        return check_teacher_spec(v)

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
            (self.reward_family == RewardFamily.GAP or self.charge == "param",
             "charge only applies to reward_family 'gap': drop charge or set reward_family gap"),
            (self.charge == "compute" or self.compute_cost is None,
             "compute_cost only applies to charge 'compute': add --set charge=compute, or drop compute_cost"),
            (self.charge == "param" or self.param_cost is None,
             "charge 'compute' prices training compute instead of parameters: drop param_cost (in --config-json set "
             "\"param_cost\": null; --set charge=compute alone turns a preset's param_cost 'auto' into compute_cost "
             "'auto') and give λ_c as compute_cost"),
            (self.init_from is None or (self.init_from.startswith("iql:") and len(self.init_from) > 4),
             "init_from must be 'iql:PATH' (an IQL checkpoint or run directory)"),
            (self.init_datasets is None or (self.init_from is not None and len(self.init_datasets) > 0),
             "init_datasets needs init_from and at least one directory"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserInputError(message)
        self._check_teacher()
        self.blueprint_indices()
        get_task_spec(self.task).augment_in_force(self.augment)  # a task without images takes no augmentation
        placement = placement_problem(self.workers, self.executor, self.ray_address)
        if placement:
            raise UserInputError(placement)
        self._check_family()
        if self.reward_family != RewardFamily.SPARSE:
            changed = [k for k in ("param_budget", "param_penalty_weight", "sparse_reward_scale")
                       if getattr(self, k) != getattr(_SPARSE_DEFAULTS, k)]
            if changed:
                raise UserInputError(f"{changed} only apply to reward_family 'sparse' "
                                     f"(got '{self.reward_family.value}')")
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

    def _check_family(self) -> None:
        """A family run's task is its first training type (it builds the policy's action space, which every type of
        a family shares), it has no sample cap of its own (each type brings one), and its gap reward charges each
        type its own λ_p: measured per type ("auto") or given per type, never one number for all."""
        if self.family is None:
            if self.type_param_costs is not None:
                raise UserInputError("type_param_costs only applies to a family run: set family or drop them")
            return
        family = get_family(self.family)
        if self.charge != "param":
            raise UserInputError(f"a run across family {family.key} charges each training type its own λ_p; the "
                                 f"compute charge is measured per task only: drop charge={self.charge}")
        fields = family_fields(family, {})
        if self.task != fields["task"] or self.max_train_samples is not None:
            raise UserInputError(f"a run across family {family.key} trains each env group on the type its data seed "
                                 f"draws, at that type's sample cap: its task is {fields['task']} (whose action space "
                                 f"every type shares) and max_train_samples null. `esper train ppo --family` and "
                                 f"`esper study --family` set both: drop --set task and max_train_samples there; in "
                                 f"--config-json or from Python, set \"task\": \"{fields['task']}\" and "
                                 f"\"max_train_samples\": null")
        if self.reward_family != RewardFamily.GAP:
            if self.type_param_costs is not None:
                raise UserInputError("type_param_costs only applies to reward_family 'gap'")
            return
        if self.param_cost == AUTO_COST:
            if self.type_param_costs is not None:
                raise UserInputError("param_cost 'auto' measures type_param_costs: give one of them (with --family, "
                                     "--set type_param_costs=... alone replaces the preset's 'auto'; in --config-json "
                                     "set \"param_cost\": null beside them)")
            return
        if self.param_cost is not None:
            raise UserInputError(f"a run across family {family.key} charges each training type its own λ_p: drop "
                                 f"param_cost={self.param_cost} and set param_cost 'auto' (measured per type) or "
                                 f"type_param_costs")
        names = [t.name for t in family.training]
        if self.type_param_costs is None or sorted(self.type_param_costs) != sorted(names):
            raise UserInputError(f"type_param_costs must give λ_p for exactly the training types {names} of family "
                                 f"{family.key} (or set param_cost 'auto' to measure them), got "
                                 f"{sorted(self.type_param_costs or {})}")

    def blueprint_indices(self) -> frozenset[int] | None:
        """`blueprints` as indices of the topology's blueprint head (None: all of them); unknown names are refused."""
        if self.blueprints is None:
            return None
        head = get_task_spec(self.task).action_space.head
        germinable = head[1:]  # index 0 is the noop blueprint, never a germination
        unknown = sorted(set(self.blueprints) - set(germinable))
        if unknown or not self.blueprints:
            hint = "".join(did_you_mean(name, germinable) for name in unknown)
            raise UserInputError(f"blueprints must name at least one of {list(germinable)} (task {self.task}), got "
                                 f"{self.blueprints}{hint}")
        return frozenset(head.index(b) for b in self.blueprints)

    def charged_param_cost(self, itype: str | None = None) -> float | None:
        """The λ_p the reward charges (None: the task's measured one, or no λ_p for a reward without one); in a
        family run, on training type `itype`. "auto" is measured by the command line (`esper train ppo`,
        `esper study`) before training, so a config that still says "auto" here is refused."""
        if isinstance(self.param_cost, str):  # AUTO_COST, the one string the field accepts
            raise UserInputError("param_cost 'auto' is measured by `esper train ppo` and `esper study` before training;"
                                 " from Python, measure it with esper.evaluation.param_cost.cached_costs and pass "
                                 "the number")
        if self.type_param_costs is not None:
            assert itype is not None, "a family run charges λ_p per training type"
            return self.type_param_costs[itype]
        return self.param_cost

    def charged_compute_cost(self) -> float | None:
        """The λ_c the reward charges (None: the task's measured one, or none where the charge is not 'compute');
        "auto" is refused as in `charged_param_cost`."""
        if isinstance(self.compute_cost, str):  # AUTO_COST
            raise UserInputError("compute_cost 'auto' is measured by `esper train ppo` and `esper study` before "
                                 "training; from Python, measure it with esper.evaluation.param_cost.cached_costs and "
                                 "pass the number")
        return self.compute_cost

    def charge_and_cost(self) -> tuple[Charge, float]:
        """What the gap reward charges and its λ: given, else the task's measured one, else a clear refusal."""
        given = self.charged_compute_cost() if self.charge == "compute" else self.charged_param_cost()
        return self.charge, charged_cost(self.charge, self.task, given, self.max_train_samples)

    def worker_options(self) -> WorkerOptions:
        """Where the env groups run (Ray actors sharing the env devices' GPUs). Placement only: any number of
        workers computes the same run."""
        return WorkerOptions(workers=self.workers, executor=self.executor, ray_address=self.ray_address,
                             threads=self.threads, cuda_devices=cuda_device_count(self.devices or [self.device]))

    # ------------------------------------------------------------------ construction

    @classmethod
    def preset(cls, name: str) -> TrainingConfig:
        if name not in PRESETS:
            raise UserInputError(f"Unknown preset '{name}'{did_you_mean(name, PRESETS)}. Available: {sorted(PRESETS)}")
        return cls(**PRESETS[name])


def charge_fields(base: TrainingConfig, overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides` on `base` (a preset) that switch to the compute charge and give no cost of either charge: the
    preset's request to measure λ_p in the run's setting ("auto") becomes the same request for λ_c, so `--set
    charge=compute` alone makes a complete config; a given λ_p is never read as a λ_c (none: the task's λ_c)."""
    if overrides.get("charge") != "compute" or {"param_cost", "compute_cost"} & set(overrides):
        return overrides
    return {"param_cost": None, "compute_cost": AUTO_COST if base.param_cost == AUTO_COST else None, **overrides}


def family_fields(family: Family, overrides: dict[str, Any]) -> dict[str, Any]:
    """A run across `family`: what it sets on top of a preset — the family, its first training type's task (the
    policy's action space, the same for every type), no sample cap of its own, and no measured λ_p where the user gives
    `type_param_costs` — then the user's `overrides`."""
    given = {"param_cost": None} if "type_param_costs" in overrides and "param_cost" not in overrides else {}
    return {"family": family.key, "task": family_task(family, family.training[0]), "max_train_samples": None,
            **given, **overrides}
