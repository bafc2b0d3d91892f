"""Tolaria: training mechanics (train/validate steps, gradient ratios, counterfactuals) and the governor."""

from esper.tolaria.governor import GovernorReport, TolariaGovernor, export_train_state, restore_train_state
from esper.tolaria.trainer import (
    TrainEpochStats,
    TrainState,
    ValStats,
    compute_task_loss,
    counterfactual_slots,
    finish_train_epoch,
    finish_validation,
    train_epoch,
    train_step,
    validate,
    validate_batch,
)

__all__ = [
    "GovernorReport",
    "TolariaGovernor",
    "TrainEpochStats",
    "TrainState",
    "ValStats",
    "compute_task_loss",
    "counterfactual_slots",
    "export_train_state",
    "finish_train_epoch",
    "finish_validation",
    "restore_train_state",
    "train_epoch",
    "train_step",
    "validate",
    "validate_batch",
]
