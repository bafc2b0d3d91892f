"""Training signals and the observation every controller receives."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from esper.leyline.actions import ActionSpace, ActionValidity
from esper.leyline.reports import SeedStateReport


@dataclass(frozen=True, slots=True)
class TrainingMetrics:
    epoch: int = 0
    global_step: int = 0
    train_loss: float = 0.0
    val_loss: float = 0.0
    loss_delta: float = 0.0
    train_accuracy: float = 0.0
    val_accuracy: float = 0.0
    accuracy_delta: float = 0.0
    plateau_epochs: int = 0
    host_stabilized: int = 0
    best_val_accuracy: float = 0.0
    best_val_loss: float = math.inf
    grad_norm_host: float = 0.0


@dataclass(frozen=True, slots=True)
class TrainingSignals:
    metrics: TrainingMetrics = field(default_factory=TrainingMetrics)
    active_seeds: tuple[str, ...] = ()
    available_slots: tuple[str, ...] = ()
    seed_stage: int = 0
    seed_epochs_in_stage: int = 0
    seed_alpha: float = 0.0
    seed_improvement: float = 0.0
    seed_counterfactual: float = 0.0
    loss_history: tuple[float, ...] = ()
    accuracy_history: tuple[float, ...] = ()
    epoch_duration_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class EnvObservation:
    env_id: int
    epoch: int
    max_epochs: int
    task: str
    topology: str
    enabled_slots: tuple[str, ...]
    signals: TrainingSignals
    slot_reports: dict[str, SeedStateReport]
    validity: ActionValidity
    host_param_count: int
    total_param_count: int
    seeds_present: int
    max_seeds: int
    random_guess_loss: float
    batches_per_epoch: int

    @property
    def action_space(self) -> ActionSpace:
        """The env's action space (its topology's blueprint head), which the validity is expressed in."""
        return self.validity.space
