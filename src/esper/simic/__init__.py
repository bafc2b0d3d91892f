"""Simic: the learners. `ppo/` trains the factored Tamiyo policy online over vectorized real episodes."""

from esper.simic.normalization import RewardNormalizer, RunningMeanStd

__all__ = ["RewardNormalizer", "RunningMeanStd"]
