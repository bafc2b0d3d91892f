"""Datagen: logged morphogenetic episodes and the tensors offline learners read."""

from esper.datagen.transitions import EpisodeIndex, TransitionBatch, TransitionDataset

__all__ = ["EpisodeIndex", "TransitionBatch", "TransitionDataset"]
