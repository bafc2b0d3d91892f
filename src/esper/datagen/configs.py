"""What a datagen episode is made of: the environment it trains, the behaviour policy that drives it, and the
per-step records that make the logged data usable for offline RL (behaviour probabilities, step metadata). The
rewards are the episode layer's reward families (`esper.env.rewards`); datagen has none of its own.

Everything here is plain data (no torch), so plans, workers and readers can share it cheaply; the two configs are
`StrictConfig`s, validated on construction.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import ConfigDict, Field, StrictFloat, StrictInt, field_validator

from esper.leyline import LifecycleOp
from esper.leyline.errors import UserInputError, did_you_mean
from esper.leyline.strict_config import BatchSize, EpisodeLength, StrictConfig

__all__ = [
    "ENVIRONMENT_PRESETS",
    "OP_NAMES",
    "POLICY_PRESETS",
    "POLICY_STRATEGIES",
    "SUPPORTED_ARCHITECTURES",
    "ActionProbabilities",
    "BehaviorPolicyConfig",
    "EnvironmentConfig",
    "StepMetadata",
    "state_hash",
]

Architecture = Literal["HostCNN", "HostCNN-Wide", "HostCNN-Deep", "ResNet-18", "ResNet-34"]
SUPPORTED_ARCHITECTURES: tuple[str, ...] = get_args(Architecture)
Strategy = Literal["threshold", "inverted", "periodic"]
POLICY_STRATEGIES: tuple[str, ...] = get_args(Strategy)
OP_NAMES: tuple[str, ...] = tuple(op.name for op in LifecycleOp)
# Greedy ties resolve towards the least disruptive op: doing nothing, then growing, then committing, then removing.
OP_TIE_ORDER: tuple[str, ...] = ("WAIT", "GERMINATE", "FOSSILIZE", "CULL")
Epochs = Annotated[StrictInt, Field(ge=0, le=1000)]


def _unknown_preset(kind: str, preset_id: str, presets: Mapping[str, Any]) -> UserInputError:
    return UserInputError(f"Unknown {kind} preset '{preset_id}'{did_you_mean(preset_id, presets)}. Available: "
                          f"{', '.join(presets)}")


class EnvironmentConfig(StrictConfig):
    """One training setup of the matrix: host architecture and the host optimizer's hyperparameters.

    Seeds use the same optimizer type and learning rate as the host, so a config fully describes how every
    parameter of an episode is trained.
    """

    model_config = ConfigDict(frozen=True)
    KIND: ClassVar[str] = "environment config"

    config_id: str = Field(min_length=1)
    architecture: Architecture
    learning_rate: StrictFloat = Field(gt=0.0, le=10.0)
    batch_size: BatchSize
    optimizer: Literal["SGD", "Adam"]
    momentum: StrictFloat = Field(default=0.9, ge=0.0, lt=1.0)
    weight_decay: StrictFloat = Field(default=0.0, ge=0.0, le=1.0)
    max_epochs: EpisodeLength = 25

    @classmethod
    def from_preset(cls, preset_id: str) -> EnvironmentConfig:
        if preset_id not in ENVIRONMENT_PRESETS:
            raise _unknown_preset("environment", preset_id, ENVIRONMENT_PRESETS)
        return ENVIRONMENT_PRESETS[preset_id]

    def with_max_epochs(self, max_epochs: int) -> EnvironmentConfig:
        """Copy with another episode length (a generation-wide override, recorded in every episode)."""
        return self.with_overrides(max_epochs=max_epochs)


def _env(config_id: str, architecture: Architecture, lr: float, batch: int = 128,
         optimizer: Literal["SGD", "Adam"] = "SGD") -> EnvironmentConfig:
    return EnvironmentConfig(config_id=config_id, architecture=architecture, learning_rate=lr, batch_size=batch,
                             optimizer=optimizer)


ENVIRONMENT_PRESETS: dict[str, EnvironmentConfig] = {
    c.config_id: c
    for c in (
        _env("baseline", "HostCNN", 0.01),
        _env("fast-lr", "HostCNN", 0.1),
        _env("slow-lr", "HostCNN", 0.001),
        _env("wide", "HostCNN-Wide", 0.01),
        _env("deep", "HostCNN-Deep", 0.01),
        _env("adam", "HostCNN", 0.001, optimizer="Adam"),
        _env("small-batch", "HostCNN", 0.01, batch=64),
        _env("large-batch", "HostCNN", 0.02, batch=256),
        _env("resnet18", "ResNet-18", 0.01),
        _env("resnet34", "ResNet-34", 0.01),
        _env("resnet34-adam", "ResNet-34", 0.001, optimizer="Adam"),
        _env("resnet34-slow", "ResNet-34", 0.005),
        _env("resnet34-small-batch", "ResNet-34", 0.01, batch=64),
    )
}


class BehaviorPolicyConfig(StrictConfig):
    """A rule-based behaviour policy: thresholds, exploration and strategy.

    `blueprint_preference` lists head blueprints to germinate in rotation; None means the topology's default
    (its first head blueprint after noop). The policy validates the names against its topology, so every logged
    action has a joint index.
    """

    model_config = ConfigDict(frozen=True)
    KIND: ClassVar[str] = "behaviour policy config"

    policy_id: str = Field(min_length=1)
    min_epochs_before_germinate: Epochs = 5
    plateau_epochs_to_germinate: Epochs = 3
    cull_after_epochs_without_improvement: Epochs = 5
    blueprint_preference: tuple[str, ...] | None = None
    epsilon: StrictFloat = Field(default=0.0, ge=0.0, le=1.0)
    temperature: StrictFloat = Field(default=1.0, gt=0.0, le=1e6)
    strategy: Strategy = "threshold"
    germinate_period: StrictInt = Field(default=5, ge=1, le=1000)

    @field_validator("blueprint_preference")
    @classmethod
    def _preference(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None and (not v or len(set(v)) != len(v)):
            raise UserInputError(f"blueprint_preference must be non-empty and unique, got {list(v)}")
        return v

    @classmethod
    def from_preset(cls, preset_id: str) -> BehaviorPolicyConfig:
        if preset_id not in POLICY_PRESETS:
            raise _unknown_preset("behaviour policy", preset_id, POLICY_PRESETS)
        return POLICY_PRESETS[preset_id]

    def with_epsilon(self, epsilon: float) -> BehaviorPolicyConfig:
        """Copy with ε-greedy exploration, named `{policy_id}-eps{ε}` so datasets tell the variants apart.

        A preset that explores by definition (random: ε = 1) only takes its own ε, which names the variant.
        """
        if self.epsilon > 0 and epsilon != self.epsilon:
            raise UserInputError(
                f"'{self.policy_id}' explores with ε = {self.epsilon} by definition; ε variants ({epsilon}) derive "
                "from the greedy presets"
            )
        return self.with_overrides(policy_id=f"{self.policy_id}-eps{epsilon}", epsilon=epsilon)


_EXPLORER_ROTATION = ("conv_light", "attention", "norm", "depthwise")


def _policy(policy_id: str, min_epochs: int = 5, plateau: int = 3, cull: int = 5, **rest: Any) -> BehaviorPolicyConfig:
    return BehaviorPolicyConfig(policy_id=policy_id, min_epochs_before_germinate=min_epochs,
                                plateau_epochs_to_germinate=plateau, cull_after_epochs_without_improvement=cull,
                                **rest)


POLICY_PRESETS: dict[str, BehaviorPolicyConfig] = {
    c.policy_id: c
    for c in (
        _policy("baseline"),
        _policy("early-intervener", 3, 2, 5),
        _policy("late-intervener", 8, 5, 5),
        _policy("quick-culler", 5, 3, 3),
        _policy("patient-culler", 5, 3, 8),
        _policy("blueprint-explorer", blueprint_preference=_EXPLORER_ROTATION),
        _policy("aggressive", 3, 2, 3),
        _policy("conservative", 8, 5, 8),
        _policy("random", epsilon=1.0),
        _policy("anti-kasmina", strategy="inverted"),
        _policy("periodic", strategy="periodic"),
    )
}


def _tie_rank(op: str) -> int:
    return OP_TIE_ORDER.index(op)


@dataclass(frozen=True)
class ActionProbabilities:
    """The op-level distribution of one decision, logged so offline learners can reweight the data.

    `greedy_probs` and `behavior_probs` hold the valid ops only; behaviour = (1 − ε)·greedy + ε·uniform(valid ops).
    `was_exploratory` records whether the ε branch produced the action.
    """

    greedy_probs: dict[str, float]
    behavior_probs: dict[str, float]
    behavior_prob: float
    greedy_action: str
    sampled_action: str
    was_exploratory: bool
    epsilon: float

    @staticmethod
    def compute_behavior_prob(greedy_probs: Mapping[str, float], action: str, epsilon: float) -> float:
        """μ(a|s) = (1 − ε)·π_greedy(a|s) + ε/|valid ops|."""
        if action not in greedy_probs:
            raise ValueError(f"Action '{action}' is not among the valid ops {list(greedy_probs)}")
        return (1.0 - epsilon) * greedy_probs[action] + epsilon / len(greedy_probs)

    @staticmethod
    def greedy_argmax(greedy_probs: Mapping[str, float]) -> str:
        """Most probable op; ties go to WAIT, then GERMINATE, FOSSILIZE, CULL."""
        return min(greedy_probs, key=lambda op: (-greedy_probs[op], _tie_rank(op)))

    @classmethod
    def from_decision(
        cls,
        greedy_probs: Mapping[str, float],
        sampled_action: str,
        epsilon: float,
        *,
        was_exploratory: bool | None = None,
    ) -> ActionProbabilities:
        """Probabilities of a decision; `was_exploratory` defaults to "the sampled op is not the greedy one"."""
        greedy_action = cls.greedy_argmax(greedy_probs)
        behavior = {op: cls.compute_behavior_prob(greedy_probs, op, epsilon) for op in greedy_probs}
        return cls(
            greedy_probs=dict(greedy_probs),
            behavior_probs=behavior,
            behavior_prob=cls.compute_behavior_prob(greedy_probs, sampled_action, epsilon),
            greedy_action=greedy_action,
            sampled_action=sampled_action,
            was_exploratory=sampled_action != greedy_action if was_exploratory is None else was_exploratory,
            epsilon=epsilon,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def state_hash(features: Sequence[float]) -> str:
    """First 16 hex chars of SHA-256 over the features rounded to 6 decimals: equal states hash equally."""
    rounded = [None if not math.isfinite(v) else round(float(v), 6) for v in features]
    return hashlib.sha256(json.dumps(rounded).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class StepMetadata:
    """Per-step bookkeeping for sequence models and dataset audits (0-based timestep).

    Episodes always run their full length, so `truncated` is written as False for readers that expect the
    Gymnasium-style pair; it is not a setting.
    """

    timestep: int
    done: bool
    state_hash: str
    active_seed_count: int
    best_seed_accuracy: float | None
    training_budget_remaining: float

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "truncated": False}
