"""SeedState metric mechanics, the stage machine and the quality gates G0..G5."""

from __future__ import annotations

import pytest
import torch

from esper.kasmina.state import LifecycleConfig, QualityGates, SeedState
from esper.leyline import GateLevel, GateResult, SeedStage


def _state(stage: SeedStage = SeedStage.DORMANT, **kw: object) -> SeedState:
    s = SeedState(seed_id="s1", blueprint_id="conv_light", slot_id="mid")
    s.stage = stage
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def test_seed_state_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        SeedState("s1", "conv_light")  # type: ignore[misc]


def test_telemetry_initialized_with_seed_info() -> None:
    s = SeedState(seed_id="seed_1", blueprint_id="attention", slot_id="late")
    assert s.telemetry.seed_id == "seed_1"
    assert s.telemetry.blueprint_id == "attention"
    assert s.telemetry.layer_id == "late"


def test_sync_telemetry_updates_from_metrics() -> None:
    s = _state(SeedStage.TRAINING, alpha=0.3)
    s.update_metrics(current_val_accuracy=75.0, epochs_in_current_stage=5)
    s.sync_telemetry(gradient_norm=2.5, gradient_health=0.9, has_vanishing=False, has_exploding=True,
                     epoch=10, max_epochs=25)
    t = s.telemetry
    assert (t.accuracy, t.epochs_in_stage, t.stage, t.alpha) == (75.0, 5, SeedStage.TRAINING.value, 0.3)
    assert (t.gradient_norm, t.gradient_health, t.has_exploding, t.epoch, t.max_epochs) == (2.5, 0.9, True, 10, 25)


def test_record_accuracy_is_the_only_epoch_clock_and_accepts_tensors() -> None:
    s = _state()
    s.update_metrics(initial_val_accuracy=50.0, current_val_accuracy=50.0, accuracy_at_stage_start=50.0)
    s.record_accuracy(torch.tensor(53.0))
    s.record_accuracy(52.0)
    p = s.metrics
    assert (p.epochs_total, p.epochs_in_current_stage) == (2, 2)
    assert p.best_val_accuracy == 53.0
    assert p.total_improvement == pytest.approx(2.0) and p.improvement_since_stage_start == pytest.approx(2.0)
    assert s.transition(SeedStage.GERMINATED, 2)
    assert s.metrics.epochs_in_current_stage == 0 and s.metrics.improvement_since_stage_start == 0.0


def test_derived_metrics_follow_every_update_and_only_measured_fields_update() -> None:
    s = _state()
    s.update_metrics(current_val_accuracy=60.0, accuracy_at_blending_start=55.0)
    assert (s.metrics.total_improvement, s.metrics.blending_delta) == (60.0, 5.0)
    for name in ("total_improvement", "current_alpha", "blending_steps_done"):
        with pytest.raises(ValueError, match=name):
            s.update_metrics(**{name: 1.0})


def test_gradient_ratio_ema_and_clamp() -> None:
    p = _state()
    p.update_gradient_ratio(0.5)
    assert p.metrics.seed_gradient_norm_ratio == 0.5
    p.update_gradient_ratio(1.5)
    assert p.metrics.seed_gradient_norm_ratio == pytest.approx(0.9 * 0.5 + 0.1 * 1.5)
    p.update_gradient_ratio(1e6)
    assert p.metrics.seed_gradient_norm_ratio == 10.0


def test_transition_records_history_and_rejects_invalid() -> None:
    s = _state()
    assert s.transition(SeedStage.GERMINATED, 3)
    assert not s.transition(SeedStage.BLENDING, 4)
    assert s.stage == SeedStage.GERMINATED
    s.update_metrics(epochs_in_current_stage=2)
    assert s.transition(SeedStage.TRAINING, 5)
    assert (s.previous_stage, s.previous_epochs_in_stage, s.stage_entered_epoch) == (SeedStage.GERMINATED, 2, 5)
    assert s.stage_history == [(SeedStage.GERMINATED, 3), (SeedStage.TRAINING, 5)]


def test_to_dict_round_trip() -> None:
    s = _state(SeedStage.BLENDING, alpha=0.4, blending_steps_done=2, blending_steps_total=5)
    s.update_metrics(counterfactual_contribution=1.5)
    s.update_gradient_norm(2.0)
    s.stage_history.append((SeedStage.BLENDING, 7))
    back = SeedState.from_dict(s.to_dict())
    assert back.to_dict() == s.to_dict()
    assert back.to_report().metrics == s.to_report().metrics
    assert back.gradient_norm_seen and not back.gradient_ratio_seen


def test_checkpoint_metrics_keys_are_the_measured_fields_and_the_ema_flags() -> None:
    """Checkpoints written before the metrics became the frozen report value still load: same keys."""
    assert list(_state().to_dict()["metrics"]) == [
        "epochs_total", "epochs_in_current_stage", "initial_val_accuracy", "current_val_accuracy",
        "best_val_accuracy", "accuracy_at_stage_start", "accuracy_at_blending_start", "counterfactual_contribution",
        "contribution_at_fossilization", "probe_contribution", "seed_gradient_norm_ratio", "seed_param_count",
        "host_param_count", "gradient_norm_avg", "_ratio_seen", "_norm_seen"]


gates = QualityGates(LifecycleConfig())


@pytest.mark.parametrize(("c", "passes"), [(1.0, True), (2.0, True), (0.99, False), (0.0, False), (-1.0, False)])
def test_g5_contribution_boundaries(c: float, passes: bool) -> None:
    s = _state(SeedStage.PROBATIONARY)
    s.update_metrics(counterfactual_contribution=c)
    result = gates.check_gate(s, SeedStage.FOSSILIZED)
    assert result.gate == GateLevel.G5 and result.passed is passes


def test_g5_never_falls_back_to_total_improvement() -> None:
    s = _state(SeedStage.PROBATIONARY)
    s.update_metrics(current_val_accuracy=90.0)  # huge total improvement, no counterfactual
    result = gates.check_gate(s, SeedStage.FOSSILIZED)
    assert not result.passed and "counterfactual_not_available" in result.checks_failed


def test_g5_requires_health() -> None:
    s = _state(SeedStage.PROBATIONARY, is_healthy=False)
    s.update_metrics(counterfactual_contribution=5.0)
    result = gates.check_gate(s, SeedStage.FOSSILIZED)
    assert not result.passed and "unhealthy" in result.checks_failed


def _training(eis: int, probe: float | None, ratio: float, improvement: float = 0.0) -> SeedState:
    s = _state(SeedStage.TRAINING)
    s.update_metrics(accuracy_at_stage_start=50.0, current_val_accuracy=50.0 + improvement,
                     epochs_in_current_stage=eis, seed_gradient_norm_ratio=ratio, probe_contribution=probe)
    return s


def _g2(s: SeedState, g: QualityGates = gates) -> GateResult:
    result = g.check_gate(s, SeedStage.BLENDING)
    assert result.gate == GateLevel.G2
    return result


@pytest.mark.parametrize(("probe", "passes"), [(0.0, True), (0.01, True), (2.0, True), (-0.01, False),
                                               (-5.0, False), (None, False)])
def test_g2_probe_boundaries(probe: float | None, passes: bool) -> None:
    assert _g2(_training(3, probe, 0.10)).passed is passes


def test_g2_check_names_and_score() -> None:
    ok = _g2(_training(3, 2.0, 0.10))
    assert ok.passed and ok.score == pytest.approx(0.4)
    assert ok.checks_passed == ("seed_ready", "seed_gradient_active_0.10", "probe_positive_2.00")
    assert _g2(_training(3, 10.0, 0.10)).score == 1.0
    assert _g2(_training(3, 0.0, 0.10)).checks_passed[-1] == "probe_positive_0.00"
    hurt = _g2(_training(3, -1.5, 0.10))
    assert hurt.checks_failed == ("probe_negative_-1.50",) and hurt.score == 0.0
    missing = _g2(_training(3, None, 0.10))
    assert missing.checks_failed == ("probe_not_available",) and missing.score == 0.0
    assert _g2(_training(2, None, 0.01)).checks_failed == ("seed_not_ready", "seed_gradient_low_0.01",
                                                            "probe_not_available")


def test_g2_ratio_and_epoch_boundaries() -> None:
    assert not _g2(_training(3, 10.0, 0.01)).passed
    assert _g2(_training(3, 2.0, 0.05)).passed  # exactly the minimum ratio
    assert not _g2(_training(3, 2.0, 0.049)).passed
    assert not _g2(_training(2, 2.0, 0.10)).passed


def test_g2_ignores_the_global_accuracy() -> None:
    """An isolated seed cannot move the global accuracy, so neither a flat nor a rising host decides G2."""
    assert _g2(_training(3, 0.5, 0.10, improvement=0.0)).passed
    assert _g2(_training(3, 0.5, 0.10, improvement=-3.0)).passed
    assert not _g2(_training(3, -0.5, 0.10, improvement=10.0)).passed


def test_g2_uses_its_own_thresholds() -> None:
    lm_gates = QualityGates(LifecycleConfig(min_training_epochs=5, min_blending_epochs=3))
    assert not _g2(_training(4, 2.0, 0.1), lm_gates).passed
    assert _g2(_training(5, 2.0, 0.1), lm_gates).passed
    strict = QualityGates(LifecycleConfig(min_probe_contribution=1.0))
    assert not _g2(_training(3, 0.99, 0.1), strict).passed
    assert _g2(_training(3, 1.0, 0.1), strict).passed


def test_probe_contribution_reported_and_round_trips() -> None:
    s = _training(3, -0.75, 0.1)
    assert s.to_report().metrics.probe_contribution == -0.75
    back = SeedState.from_dict(s.to_dict())
    assert back.metrics.probe_contribution == -0.75 and back.to_dict() == s.to_dict()


def test_g3_requires_complete_ramp_high_alpha_and_dwell() -> None:
    s = _state(SeedStage.BLENDING, alpha=1.0, blending_steps_done=5, blending_steps_total=5)
    s.update_metrics(epochs_in_current_stage=3)
    assert gates.check_gate(s, SeedStage.PROBATIONARY).passed
    s.blending_steps_done = 4
    assert "blending_incomplete_1" in gates.check_gate(s, SeedStage.PROBATIONARY).checks_failed
    s.blending_steps_done, s.alpha = 5, 0.9
    assert "alpha_low_0.90" in gates.check_gate(s, SeedStage.PROBATIONARY).checks_failed
    s.alpha = 1.0
    s.update_metrics(epochs_in_current_stage=2)
    assert not gates.check_gate(s, SeedStage.PROBATIONARY).passed


def test_g0_g1_and_unguarded_targets() -> None:
    s = SeedState(seed_id="", blueprint_id="x")
    assert gates.check_gate(s, SeedStage.GERMINATED).checks_failed == ("seed_id_missing",)
    assert not gates.check_gate(_state(SeedStage.DORMANT), SeedStage.TRAINING).passed
    assert gates.check_gate(_state(SeedStage.GERMINATED), SeedStage.TRAINING).passed
    with pytest.raises(ValueError):
        gates.check_gate(_state(), SeedStage.CULLED)


def test_report_fields_populate() -> None:
    s = _state(SeedStage.BLENDING, alpha=0.6, blending_steps_done=3, blending_steps_total=5)
    s.update_metrics(counterfactual_contribution=2.0, seed_gradient_norm_ratio=0.2, seed_param_count=100,
                     host_param_count=6418)
    r = s.to_report()
    assert r.metrics.counterfactual_contribution == 2.0 and r.metrics.seed_gradient_norm_ratio == 0.2
    assert (r.metrics.seed_param_count, r.metrics.host_param_count) == (100, 6418)
    assert (r.metrics.current_alpha, r.metrics.blending_steps_done) == (0.6, 3)
    assert r.telemetry is not None and r.telemetry is not s.telemetry
