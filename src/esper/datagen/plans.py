"""The generation matrix: which episodes a dataset holds, their ids and their paired seeds.

Seeds are paired: every behaviour policy runs episode i of an environment config on the same seed
(`derive_seed(base_seed, "datagen", config id, i)`, so a subset of the matrix reproduces the full matrix's
seeds). Policies are therefore compared on identical host initializations and data orders, and the static twin
of (config, seed) is trained once and shared by all of them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from esper.datagen.configs import ENVIRONMENT_PRESETS, POLICY_PRESETS, BehaviorPolicyConfig, EnvironmentConfig
from esper.datagen.policies import BehaviorPolicy
from esper.env import StoredTwin
from esper.leyline.actions import ActionSpace
from esper.leyline.errors import UserInputError, did_you_mean
from esper.leyline.seeding import SeedStream, derive_seed

__all__ = [
    "DEFAULT_BASE_SEED",
    "EpisodeTask",
    "GenerationPlan",
    "TwinPlan",
    "create_generation_matrix",
    "matrix_hash",
    "paired_seed",
]

DEFAULT_BASE_SEED = 42


def paired_seed(env_config_id: str, episode_idx: int, base_seed: int = DEFAULT_BASE_SEED) -> int:
    """The seed every behaviour policy uses for episode `episode_idx` of `env_config_id` (the datagen seed stream)."""
    if env_config_id not in ENVIRONMENT_PRESETS:
        raise UserInputError(f"Unknown environment preset '{env_config_id}'"
                             f"{did_you_mean(env_config_id, ENVIRONMENT_PRESETS)}. "
                             f"Available: {', '.join(ENVIRONMENT_PRESETS)}")
    if episode_idx < 0:
        raise UserInputError(f"episode_idx must be >= 0, got {episode_idx}")
    return derive_seed(base_seed, SeedStream.DATAGEN, env_config_id, episode_idx)


def twin_id_for(env_config_id: str, random_seed: int) -> str:
    return f"{env_config_id}_seed{random_seed}"


@dataclass(frozen=True)
class TwinPlan:
    """The static (seedless) twin of one (environment config, seed): trained once, shared by every policy."""

    env_config_id: str
    random_seed: int

    @property
    def twin_id(self) -> str:
        return twin_id_for(self.env_config_id, self.random_seed)

    def get_env_config(self) -> EnvironmentConfig:
        return EnvironmentConfig.from_preset(self.env_config_id)

    def to_dict(self) -> dict[str, Any]:
        return {"twin_id": self.twin_id, "env_config_id": self.env_config_id, "random_seed": self.random_seed}

    def curves(self, record: Mapping[str, Any]) -> StoredTwin:
        """This twin's curves from its stored record (JSON stores non-finite values as null: they come back NaN)."""
        def curve(key: str) -> tuple[float, ...]:
            return tuple(float("nan") if v is None else float(v) for v in record[key])

        return StoredTwin(self.random_seed, curve("val_accuracy_curve"), curve("val_loss_curve"))

    def twin_block(self, twin: StoredTwin) -> dict[str, Any]:
        """An episode's top-level `twin` block: this twin's id and curves."""
        return {"twin_id": self.twin_id, "val_accuracy_curve": list(twin.accuracy_curve),
                "val_loss_curve": list(twin.loss_curve)}


@dataclass(frozen=True)
class GenerationPlan:
    """One episode of the matrix. `random_seed` None means the paired seed under the default base seed."""

    env_config_id: str
    policy_config_id: str
    epsilon: float
    episode_idx: int
    random_seed: int | None = None

    def __post_init__(self) -> None:
        EnvironmentConfig.from_preset(self.env_config_id)
        base = BehaviorPolicyConfig.from_preset(self.policy_config_id)
        if not 0.0 <= self.epsilon <= 1.0:
            raise UserInputError(f"epsilon must be in [0, 1], got {self.epsilon}")
        if base.epsilon > 0 and self.epsilon != base.epsilon:
            raise UserInputError(f"Preset '{self.policy_config_id}' runs with ε = {base.epsilon}, "
                                 f"got ε = {self.epsilon}")
        if self.random_seed is None:
            object.__setattr__(self, "random_seed", paired_seed(self.env_config_id, self.episode_idx))

    @property
    def seed(self) -> int:
        """`random_seed`, never None after construction."""
        assert self.random_seed is not None
        return self.random_seed

    @property
    def policy_label(self) -> str:
        return f"{self.policy_config_id}-eps{self.epsilon}" if self.epsilon > 0 else self.policy_config_id

    @property
    def episode_id(self) -> str:
        return f"{self.env_config_id}_{self.policy_label}_{self.episode_idx:04d}"

    @property
    def twin(self) -> TwinPlan:
        return TwinPlan(self.env_config_id, self.seed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "env_config_id": self.env_config_id,
            "policy_config_id": self.policy_config_id,
            "epsilon": self.epsilon,
            "episode_idx": self.episode_idx,
            "random_seed": self.random_seed,
        }

    def get_env_config(self) -> EnvironmentConfig:
        return EnvironmentConfig.from_preset(self.env_config_id)

    def get_policy_config(self) -> BehaviorPolicyConfig:
        config = BehaviorPolicyConfig.from_preset(self.policy_config_id)
        return config.with_epsilon(self.epsilon) if self.epsilon > 0 else config

    def create_policy(self, space: ActionSpace) -> BehaviorPolicy:
        """The episode's behaviour policy, with a random stream of its own (distinct per policy variant)."""
        return BehaviorPolicy(self.get_policy_config(), derive_seed(self.seed, self.episode_id), space=space)


@dataclass(frozen=True)
class EpisodeTask:
    """What a worker needs to generate one episode: its plan and its precomputed static twin (`plan.twin`'s)."""

    plan: GenerationPlan
    twin: StoredTwin


def create_generation_matrix(
    env_ids: Sequence[str] | None = None,
    policy_ids: Sequence[str] | None = None,
    episodes_per_combo: int = 10,
    epsilon_values: Sequence[float] | None = None,
    base_seed: int = DEFAULT_BASE_SEED,
) -> list[GenerationPlan]:
    """Plans in matrix order (env → policy → ε → episode index) with paired seeds.

    ε variants: `epsilon_values` when given, else none (ε = 0); a preset that explores by definition (random,
    ε = 1) always runs at its own ε, since uniform exploration has no greedy part to vary.
    """
    envs = list(ENVIRONMENT_PRESETS) if env_ids is None else list(env_ids)
    policies = list(POLICY_PRESETS) if policy_ids is None else list(policy_ids)
    if episodes_per_combo < 1:
        raise UserInputError(f"episodes_per_combo must be >= 1, got {episodes_per_combo}")
    for kind, ids in (("environment", envs), ("policy", policies)):
        if len(set(ids)) != len(ids):
            raise UserInputError(f"Duplicate {kind} ids in {ids}")
    if epsilon_values is not None and len(set(epsilon_values)) != len(epsilon_values):
        raise UserInputError(f"Duplicate epsilon values in {list(epsilon_values)}")
    plans: list[GenerationPlan] = []
    for env_id in envs:
        for policy_id in policies:
            preset = BehaviorPolicyConfig.from_preset(policy_id)
            if preset.epsilon > 0:
                epsilons: Sequence[float] = [preset.epsilon]
            else:
                epsilons = [0.0] if epsilon_values is None else epsilon_values
            for epsilon in epsilons:
                for idx in range(episodes_per_combo):
                    seed = paired_seed(env_id, idx, base_seed)
                    plans.append(GenerationPlan(env_id, policy_id, float(epsilon), idx, seed))
    return plans


def matrix_hash(plans: Sequence[GenerationPlan], settings: Mapping[str, Any]) -> str:
    """Fingerprint of a matrix and the generation settings that shape its episodes (task, epochs, ...)."""
    payload = {"plans": [p.to_dict() for p in plans], "settings": dict(settings)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode("utf-8")).hexdigest()
