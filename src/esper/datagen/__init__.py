"""Datagen: offline-RL datasets from real morphogenetic episodes run under logged behaviour policies.

Importing the package registers the `behavior:PRESET[-epsE]` controllers.
"""

from esper.datagen.architectures import SUPPORTED_ARCHITECTURES, create_model
from esper.datagen.configs import (
    ENVIRONMENT_PRESETS,
    POLICY_PRESETS,
    ActionProbabilities,
    BehaviorPolicyConfig,
    EnvironmentConfig,
    StepMetadata,
)
from esper.datagen.generate import GenerateOptions, generate_episode, generate_twin
from esper.datagen.health import DatasetHealthCheck, HealthCheckResult
from esper.datagen.jobs import GenerationJobs, JobHost, generation_pool
from esper.datagen.loader import load_transitions
from esper.datagen.orchestrator import GenerationOrchestrator, MatrixMismatchError
from esper.datagen.plans import EpisodeTask, GenerationPlan, TwinPlan, create_generation_matrix
from esper.datagen.policies import BehaviorPolicy, create_policy
from esper.datagen.reader import EpisodeFormatError, read_episodes
from esper.datagen.schema import SCHEMA_VERSION
from esper.datagen.transitions import EpisodeIndex, TransitionBatch, TransitionDataset

__all__ = [
    "ENVIRONMENT_PRESETS",
    "POLICY_PRESETS",
    "SCHEMA_VERSION",
    "SUPPORTED_ARCHITECTURES",
    "ActionProbabilities",
    "BehaviorPolicy",
    "BehaviorPolicyConfig",
    "DatasetHealthCheck",
    "EnvironmentConfig",
    "EpisodeFormatError",
    "EpisodeIndex",
    "EpisodeTask",
    "GenerateOptions",
    "GenerationJobs",
    "GenerationOrchestrator",
    "GenerationPlan",
    "HealthCheckResult",
    "JobHost",
    "MatrixMismatchError",
    "StepMetadata",
    "TransitionBatch",
    "TransitionDataset",
    "TwinPlan",
    "create_generation_matrix",
    "create_model",
    "create_policy",
    "generate_episode",
    "generate_twin",
    "generation_pool",
    "load_transitions",
    "read_episodes",
]
