"""PPO for the factored lifecycle policy: config, network, buffer, update, training loop, checkpoint, controller."""

from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.config import PRESETS, TrainingConfig
from esper.simic.ppo.controller import PPOPolicy
from esper.simic.ppo.ppo_config import PPOConfig
from esper.simic.ppo.train import PPORun, PPOTrainingResult, train_ppo

__all__ = ["PRESETS", "PPOAgent", "PPOConfig", "PPOPolicy", "PPORun", "PPOTrainingResult", "TrainingConfig",
           "train_ppo"]
