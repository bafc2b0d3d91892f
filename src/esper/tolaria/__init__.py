"""Tolaria: training mechanics (train step, incubator, validation, gradient ratios, counterfactuals, probes) and the
governor."""

from esper.tolaria.governor import GovernorReport, TolariaGovernor, export_train_state, restore_train_state
from esper.tolaria.trainer import (
    BN_RECALIBRATION_BATCHES,
    TrainEpochStats,
    TrainState,
    compute_task_loss,
    finish_train_epoch,
    queue_train_epoch,
    recalibrate_batchnorm,
    train_epoch,
    train_step,
)
from esper.tolaria.validation import (
    ValStats,
    counterfactual_slots,
    finish_validation,
    probe_slots,
    queue_validation,
    validate,
    validate_batch,
)

__all__ = [
    "BN_RECALIBRATION_BATCHES",
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
    "probe_slots",
    "queue_train_epoch",
    "queue_validation",
    "recalibrate_batchnorm",
    "restore_train_state",
    "train_epoch",
    "train_step",
    "validate",
    "validate_batch",
]
