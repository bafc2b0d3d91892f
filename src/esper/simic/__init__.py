"""Simic: the RL gym. Features, masks, the policy network, PPO, rewards, the env runner and comparison."""

from esper.simic.buffer import FactoredRolloutBuffer, FactoredTransition
from esper.simic.comparison import ComparisonResult, ControllerSpec, EpisodePlan, run_comparison
from esper.simic.config import PRESETS, TrainingConfig
from esper.simic.distributions import InvalidStateMachineError, MaskedCategorical
from esper.simic.env import EnvSpec, EnvStep, EpisodeResult, MorphoEnv
from esper.simic.features import FEATURE_NAMES, obs_dim, observation_features, signals_to_features
from esper.simic.masks import build_slot_states, compute_action_masks, compute_batch_masks, condition_on_action
from esper.simic.network import FactoredActorCritic
from esper.simic.ppo import PPOAgent
from esper.simic.ppo_controller import PPOController
from esper.simic.rewards import RewardFamily, ShapedRewardComponents, StepRecord, compute_reward
from esper.simic.runner import EpochData, run_episodes, run_epoch
from esper.simic.vectorized import train_ppo_vectorized

__all__ = [
    "FEATURE_NAMES",
    "PRESETS",
    "ComparisonResult",
    "ControllerSpec",
    "EnvSpec",
    "EnvStep",
    "EpisodePlan",
    "EpisodeResult",
    "EpochData",
    "FactoredActorCritic",
    "FactoredRolloutBuffer",
    "FactoredTransition",
    "InvalidStateMachineError",
    "MaskedCategorical",
    "MorphoEnv",
    "PPOAgent",
    "PPOController",
    "RewardFamily",
    "ShapedRewardComponents",
    "StepRecord",
    "TrainingConfig",
    "build_slot_states",
    "compute_action_masks",
    "compute_batch_masks",
    "compute_reward",
    "condition_on_action",
    "obs_dim",
    "observation_features",
    "run_comparison",
    "run_episodes",
    "run_epoch",
    "signals_to_features",
    "train_ppo_vectorized",
]
