"""The episode layer: one morphogenetic training episode as an environment, and the epoch loop every controller uses.

`MorphoEnv` owns one episode (host, seeds, trainer, governor, tracker); a `Lockstep` advances many envs together,
batch-first, on shared data, and is the only caller of their epoch steps; `run_episodes` drives one with
controllers. Observation features, action masks, step records and the reward families live here too, so the
heuristic, datagen and every learner run episodes through exactly the same code.
"""

from esper.env.env import EnvSpec, MorphoEnv, StoredTwin
from esper.env.features import feature_names, obs_dim, observation_features, signals_to_features
from esper.env.lockstep import EnvStep, EpochData, EpochOrderError, Lockstep, MeasuredEpoch
from esper.env.logs import EpisodeResult
from esper.env.loop import run_episodes, run_epoch
from esper.env.masks import build_slot_states, compute_action_masks, compute_batch_masks, condition_on_action
from esper.env.rewards import RewardFamily, ShapedRewardComponents, StepRecord, compute_reward, make_reward_fn

__all__ = [
    "EnvSpec",
    "EnvStep",
    "EpisodeResult",
    "EpochData",
    "EpochOrderError",
    "Lockstep",
    "MeasuredEpoch",
    "MorphoEnv",
    "RewardFamily",
    "ShapedRewardComponents",
    "StepRecord",
    "StoredTwin",
    "build_slot_states",
    "compute_action_masks",
    "compute_batch_masks",
    "compute_reward",
    "condition_on_action",
    "feature_names",
    "make_reward_fn",
    "obs_dim",
    "observation_features",
    "run_episodes",
    "run_epoch",
    "signals_to_features",
]
