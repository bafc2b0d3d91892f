"""Reports and signals: SeedMetrics, SeedStateReport, TrainingMetrics, signals, observation."""

from __future__ import annotations

import dataclasses
import math

import pytest

from esper.leyline import (
    UNRECORDED_HEADS,
    ActionSpace,
    EnvObservation,
    SeedMetrics,
    SeedStage,
    SeedStateReport,
    SeedTelemetry,
    TrainingMetrics,
    TrainingSignals,
    compute_action_validity,
)


def report(stage: SeedStage = SeedStage.BLENDING, **metric_overrides: float | None) -> SeedStateReport:
    return SeedStateReport(
        seed_id="seed_0",
        slot_id="mid",
        blueprint_id="norm",
        blend_id="linear",
        stage=stage,
        previous_stage=SeedStage.TRAINING,
        previous_epochs_in_stage=3,
        stage_entered_epoch=7,
        metrics=SeedMetrics(**metric_overrides),  # type: ignore[arg-type]
    )


def test_seed_metrics_defaults() -> None:
    m = SeedMetrics()
    ints = ("epochs_total", "epochs_in_current_stage", "seed_param_count", "host_param_count")
    ints += ("blending_steps_done", "blending_steps_total")
    for name in ints:
        assert getattr(m, name) == 0, name
    floats = (
        "initial_val_accuracy",
        "current_val_accuracy",
        "best_val_accuracy",
        "accuracy_at_stage_start",
        "total_improvement",
        "improvement_since_stage_start",
        "blending_delta",
        "seed_gradient_norm_ratio",
        "gradient_norm_avg",
        "current_alpha",
    )
    for name in floats:
        assert getattr(m, name) == 0.0, name
    assert m.accuracy_at_blending_start is None
    assert m.counterfactual_contribution is None
    assert m.contribution_at_fossilization is None
    assert m.probe_contribution is None
    assert {f.name for f in dataclasses.fields(SeedMetrics)} == {*ints, *floats} | {
        "accuracy_at_blending_start",
        "counterfactual_contribution",
        "contribution_at_fossilization",
        "probe_contribution",
    }


def test_seed_metrics_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SeedMetrics().epochs_total = 3  # type: ignore[misc]


def test_report_improvement_prefers_counterfactual() -> None:
    assert report(improvement_since_stage_start=1.5).improvement == 1.5
    assert report(improvement_since_stage_start=1.5, counterfactual_contribution=-2.0).improvement == -2.0
    assert report(improvement_since_stage_start=1.5, counterfactual_contribution=0.0).improvement == 0.0


def test_report_improvement_of_a_training_seed_is_its_probe() -> None:
    training = SeedStage.TRAINING
    assert report(training, improvement_since_stage_start=1.5, probe_contribution=-0.5).improvement == -0.5
    assert report(training, improvement_since_stage_start=1.5).improvement == 1.5  # not probed yet
    # Once blended, the probe measured while training is stale: only the ablation counterfactual counts.
    assert report(improvement_since_stage_start=1.5, probe_contribution=-0.5).improvement == 1.5
    assert report(improvement_since_stage_start=1.5, probe_contribution=-0.5,
                  counterfactual_contribution=3.0).improvement == 3.0


def test_report_fields_and_defaults() -> None:
    r = report()
    assert r.stage is SeedStage.BLENDING and r.previous_stage is SeedStage.TRAINING
    assert r.telemetry is None and r.is_healthy is True and r.is_improving is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.stage = SeedStage.PROBATIONARY  # type: ignore[misc]
    with_telemetry = dataclasses.replace(r, telemetry=SeedTelemetry(seed_id="seed_0", layer_id="mid"))
    assert with_telemetry.telemetry is not None and with_telemetry.telemetry.layer_id == "mid"


def test_training_metrics_defaults() -> None:
    m = TrainingMetrics()
    assert math.isinf(m.best_val_loss) and m.best_val_loss > 0
    assert m.loss_delta == 0.0 and m.accuracy_delta == 0.0
    assert m.epoch == 0 and m.global_step == 0 and m.plateau_epochs == 0 and m.host_stabilized == 0
    assert m.best_val_accuracy == 0.0 and m.grad_norm_host == 0.0
    names = {f.name for f in dataclasses.fields(TrainingMetrics)}
    assert names == {
        "epoch",
        "global_step",
        "train_loss",
        "val_loss",
        "loss_delta",
        "train_accuracy",
        "val_accuracy",
        "accuracy_delta",
        "plateau_epochs",
        "host_stabilized",
        "best_val_accuracy",
        "best_val_loss",
        "grad_norm_host",
    }


def test_training_signals_defaults() -> None:
    a, b = TrainingSignals(), TrainingSignals()
    assert a.metrics == TrainingMetrics()
    assert a.active_seeds == () and a.available_slots == ()
    assert a.loss_history == () and a.accuracy_history == ()
    assert a == b


def test_env_observation_holds_contract_fields() -> None:
    space = ActionSpace("cnn", UNRECORDED_HEADS["cnn"])
    validity = compute_action_validity({"early": None, "mid": None, "late": None}, space=space)
    obs = EnvObservation(
        env_id=0,
        epoch=1,
        max_epochs=25,
        task="synthetic",
        topology="cnn",
        enabled_slots=("early", "mid", "late"),
        signals=TrainingSignals(),
        slot_reports={"mid": report()},
        validity=validity,
        host_param_count=100,
        total_param_count=120,
        seeds_present=1,
        max_seeds=0,
        random_guess_loss=math.log(10),
        batches_per_epoch=4,
    )
    assert obs.validity.op[0] is True
    assert obs.action_space is space
    assert obs.slot_reports["mid"].slot_id == "mid"
