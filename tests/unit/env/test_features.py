"""Observation features: the documented layout, scaling and robustness."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper.env.features import FEATURE_RANGE, feature_names, obs_dim, safe, signals_to_features
from esper.leyline import (
    UNRECORDED_HEADS,
    ActionSpace,
    SeedMetrics,
    SeedStage,
    SeedStateReport,
    SeedTelemetry,
    TrainingMetrics,
    TrainingSignals,
)

L10 = math.log(10)
CNN = ActionSpace("cnn", UNRECORDED_HEADS["cnn"])
TRANSFORMER = ActionSpace("transformer", UNRECORDED_HEADS["transformer"])
PLUGIN = ActionSpace("cnn", (*UNRECORDED_HEADS["cnn"], "pointwise"))
FEATURE_NAMES = feature_names(CNN)


def report(
    slot: str,
    blueprint: str = "conv_light",
    stage: SeedStage = SeedStage.TRAINING,
    *,
    alpha: float = 0.0,
    contribution: float | None = None,
    improvement: float = 0.0,
    telemetry: SeedTelemetry | None = None,
) -> SeedStateReport:
    return SeedStateReport(
        seed_id=f"seed_{slot}",
        slot_id=slot,
        blueprint_id=blueprint,
        blend_id="linear",
        stage=stage,
        previous_stage=SeedStage.GERMINATED,
        previous_epochs_in_stage=1,
        stage_entered_epoch=2,
        metrics=SeedMetrics(
            current_alpha=alpha, counterfactual_contribution=contribution, improvement_since_stage_start=improvement
        ),
        telemetry=telemetry,
    )


def features(
    signals: TrainingSignals | None = None,
    reports: dict[str, SeedStateReport] | None = None,
    enabled: tuple[str, ...] = ("early", "mid", "late"),
    **overrides: Any,
) -> list[float]:
    kwargs: dict[str, Any] = {
        "slot_reports": reports or {},
        "enabled_slots": enabled,
        "space": CNN,
        "max_epochs": 25,
        "host_param_count": 1000,
        "seed_param_count_total": 0,
        "seeds_present": len(reports or {}),
        "max_seeds": 0,
        "random_guess_loss": L10,
    }
    kwargs.update(overrides)
    return signals_to_features(signals or TrainingSignals(), **kwargs)


def test_lengths_and_names() -> None:
    assert len(features()) == 80 == obs_dim(CNN, True)
    assert len(features(use_telemetry=False)) == 50 == obs_dim(CNN, False) == len(feature_names(CNN, False))
    assert len(FEATURE_NAMES) == 80 and len(set(FEATURE_NAMES)) == 80
    assert FEATURE_NAMES[23] == "early_occupied"
    assert FEATURE_NAMES[32] == "mid_occupied"
    assert FEATURE_NAMES[41] == "late_occupied"
    assert FEATURE_NAMES[50] == "early_tel_gradient_norm"
    assert FEATURE_NAMES[70] == "late_tel_gradient_norm"


def test_slot_block_positions_and_one_hot() -> None:
    f = features(reports={"early": report("early", "conv_light"), "mid": report("mid", "attention"),
                          "late": report("late", "noop")})
    assert f[23] == 1.0 and f[32] == 1.0 and f[41] == 1.0
    assert f[28] == 1.0 and sum(f[27:32]) == 1.0  # conv_light = head 1
    assert f[38] == 1.0 and sum(f[36:41]) == 1.0  # attention = head 2
    assert f[45] == 1.0 and sum(f[45:50]) == 1.0  # noop = head 0
    assert f[:22] == features()[:22]


def test_empty_slots_are_zero_and_early_block_starts_at_23() -> None:
    f = features(reports={"early": report("early", "norm")})
    assert f[22] == pytest.approx(1 / 3)  # occupancy, not part of the early block
    assert f[23:32] == [1.0, pytest.approx(1 / 3), 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert f[32:50] == [0.0] * 18


def test_blueprint_outside_head_gives_zero_one_hot_and_topology_head() -> None:
    f = features(reports={"early": report("early", "lora")})
    assert f[23] == 1.0 and f[27:32] == [0.0] * 5
    t = features(reports={"early": report("early", "lora")}, space=TRANSFORMER)
    assert t[28] == 1.0


def test_a_plugin_blueprint_widens_every_slot_block_by_one() -> None:
    """Six head blueprints: slot blocks of 10 (83 features, 53 without telemetry); the plugin's one-hot is last."""
    names = feature_names(PLUGIN)
    assert (len(names), obs_dim(PLUGIN), obs_dim(PLUGIN, False)) == (83, 83, 53)
    assert names[23:33] == tuple(f"early_{n}" for n in ("occupied", "stage", "alpha", "improvement", "blueprint_noop",
                                                         "blueprint_conv_light", "blueprint_attention",
                                                         "blueprint_norm", "blueprint_depthwise",
                                                         "blueprint_pointwise"))
    f = features(reports={"mid": report("mid", "pointwise")}, space=PLUGIN)
    assert len(f) == 83 and f[33] == 1.0 and f[37:43] == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]


def test_stage_alpha_and_improvement_scaling() -> None:
    r = report("mid", stage=SeedStage.BLENDING, alpha=0.4, contribution=5.0, improvement=-30.0)
    f = features(reports={"mid": r})
    assert f[32:36] == [1.0, pytest.approx(0.5), pytest.approx(0.4), pytest.approx(0.5)]  # contribution wins
    f = features(reports={"mid": report("mid", improvement=-30.0)})
    assert f[35] == -1.0  # improvement_since_stage_start, clamped
    f = features(reports={"mid": report("mid", stage=SeedStage.FOSSILIZED, alpha=1.0)})
    assert f[33] == 1.0 and f[34] == 1.0


def test_global_features_scaling() -> None:
    m = TrainingMetrics(
        epoch=5,
        host_stabilized=1,
        train_loss=2 * L10,
        val_loss=L10,
        loss_delta=0.05 * L10,
        train_accuracy=50.0,
        val_accuracy=40.0,
        accuracy_delta=100.0,
        plateau_epochs=20,
        best_val_accuracy=60.0,
        best_val_loss=100 * L10,
    )
    s = TrainingSignals(metrics=m, loss_history=(L10, 0.5 * L10), accuracy_history=tuple(range(10, 80, 10)))
    f = features(s, seed_param_count_total=500, seeds_present=1, max_seeds=2)
    expected = [0.2, 1.0, 2.0, 1.0, 1.0, 0.5, 0.4, 5.0, 1.0, 0.6, 5.0]
    assert f[:11] == pytest.approx(expected)
    assert f[11:16] == pytest.approx([0.0, 0.0, 0.0, 1.0, 0.5])  # left-padded, oldest first
    assert f[16:21] == pytest.approx([0.3, 0.4, 0.5, 0.6, 0.7])  # last 5, oldest first
    assert f[21] == pytest.approx(0.5)
    assert f[22] == pytest.approx(0.5)  # capacity = min(max_seeds 2, 3 enabled)


def test_first_epoch_defaults_are_sane() -> None:
    f = features()  # best_val_loss = +inf before the first update
    assert f[10] == 1.0
    assert all(math.isfinite(x) for x in f)


def test_param_growth_and_occupancy_edges() -> None:
    assert features(host_param_count=0, seed_param_count_total=10)[21] == 0.0
    assert features(seed_param_count_total=10**9)[21] == 10.0
    assert features(enabled=("mid",), seeds_present=1, reports={"mid": report("mid")})[22] == 1.0


def test_telemetry_blocks_aligned_with_zeros_for_disabled_slots() -> None:
    early_tel = SeedTelemetry(seed_id="a", gradient_norm=5.0, accuracy=75.0, stage=3)
    late_tel = SeedTelemetry(seed_id="b", gradient_norm=1.0, has_exploding=True, epoch=10, max_epochs=20)
    f = features(
        reports={"early": report("early", telemetry=early_tel), "late": report("late", telemetry=late_tel)},
        enabled=("late", "early"),
    )
    assert f[50:60] == pytest.approx(early_tel.to_features())
    assert f[60:70] == [0.0] * 10
    assert f[70:80] == pytest.approx(late_tel.to_features())
    assert f[50] == pytest.approx(0.5) and f[79] == pytest.approx(0.5)
    assert f[32:41] == [0.0] * 9  # the disabled mid slot


def test_report_without_telemetry_gives_zero_block() -> None:
    f = features(reports={"mid": report("mid")})
    assert f[60:70] == [0.0] * 10 and f[32] == 1.0


def test_report_for_disabled_slot_is_an_error() -> None:
    with pytest.raises(ValueError, match="not enabled"):
        features(reports={"mid": report("mid")}, enabled=("early",))
    with pytest.raises(ValueError, match="Unknown slot"):
        features(enabled=("middle",))


def test_slot_order_does_not_depend_on_dict_or_enabled_order() -> None:
    a, b = report("early", "norm"), report("late", "depthwise")
    f1 = features(reports={"early": a, "late": b}, enabled=("early", "late"))
    f2 = features(reports={"late": b, "early": a}, enabled=("late", "early"))
    assert f1 == f2


def test_all_finite_for_nan_and_inf_inputs() -> None:
    nan, inf = float("nan"), float("inf")
    m = TrainingMetrics(
        train_loss=nan, val_loss=inf, loss_delta=-inf, train_accuracy=nan, val_accuracy=inf, accuracy_delta=nan,
        best_val_accuracy=nan, best_val_loss=-inf,
    )
    s = TrainingSignals(metrics=m, loss_history=(nan, inf, -inf), accuracy_history=(nan, inf))
    tel = SeedTelemetry(seed_id="x", gradient_norm=nan, accuracy=inf, accuracy_delta=nan, alpha=nan)
    r = report("early", alpha=nan, contribution=inf, telemetry=tel)
    f = features(s, reports={"early": r}, seed_param_count_total=10)
    assert len(f) == 80
    assert all(math.isfinite(x) for x in f)
    assert f[2] == 1.0 and f[3] == 1.0  # non-finite losses read as the random-guess loss


def test_invalid_random_guess_loss_raises() -> None:
    with pytest.raises(ValueError, match="random_guess_loss"):
        features(random_guess_loss=0.0)


def test_safe() -> None:
    assert safe(None, 3.0) == 3.0
    assert safe(float("nan"), 1.0) == 1.0
    assert safe(float("inf"), -1.0) == -1.0
    assert safe(float("-inf"), 2.0) == 2.0
    assert safe(4, 0.0) == 4.0


ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True)
PERCENT = st.floats(0.0, 100.0)


@given(epoch=st.integers(0, 25), losses=st.lists(ANY_FLOAT, min_size=4, max_size=4),
       deltas=st.lists(ANY_FLOAT, min_size=3, max_size=3), accuracies=st.lists(PERCENT, min_size=4, max_size=4),
       plateau=st.integers(0, 1000), history=st.lists(PERCENT, max_size=8), alpha=ANY_FLOAT,
       improvement=ANY_FLOAT, seed_params=st.integers(0, 10**9), gradient_norm=ANY_FLOAT)
def test_every_feature_lies_in_the_declared_range(epoch: int, losses: list[float], deltas: list[float],
                                                  accuracies: list[float], plateau: int, history: list[float],
                                                  alpha: float, improvement: float, seed_params: int,
                                                  gradient_norm: float) -> None:
    """Observation spaces state FEATURE_RANGE as their bounds, so no measurement may leave it."""
    m = TrainingMetrics(epoch=epoch, train_loss=losses[0], val_loss=losses[1], loss_delta=deltas[0],
                        train_accuracy=accuracies[0], val_accuracy=accuracies[1], accuracy_delta=deltas[1],
                        plateau_epochs=plateau, best_val_accuracy=accuracies[2], best_val_loss=losses[2])
    s = TrainingSignals(metrics=m, loss_history=tuple(losses), accuracy_history=tuple(history))
    tel = SeedTelemetry(seed_id="x", gradient_norm=gradient_norm, accuracy=accuracies[3], accuracy_delta=deltas[2],
                        alpha=alpha, epochs_in_stage=plateau, epoch=epoch)
    r = report("mid", alpha=alpha, improvement=improvement, telemetry=tel)
    f = features(s, reports={"mid": r}, seed_param_count_total=seed_params)
    low, high = FEATURE_RANGE
    assert all(low <= x <= high for x in f), [(n, x) for n, x in zip(FEATURE_NAMES, f) if not low <= x <= high]
