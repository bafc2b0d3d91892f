"""SignalTracker."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import astuple

import pytest

from esper.leyline import SeedStage, SeedStateReport, TelemetryEventType, TrainingSignals
from esper.tamiyo import SignalTracker
from unit.tamiyo.helpers import RecordingSink, make_report


def _step(
    tracker: SignalTracker,
    epoch: int,
    val_loss: float,
    val_accuracy: float = 50.0,
    reports: Sequence[SeedStateReport] = (),
) -> TrainingSignals:
    by_slot = {r.slot_id: r for r in reports}
    free = [s for s in ("early", "mid", "late") if s not in by_slot]
    return tracker.update(epoch, epoch * 10, val_loss + 0.1, val_accuracy + 1.0, val_loss, val_accuracy, by_slot, free)


def _run(tracker: SignalTracker, losses: Sequence[float]) -> list[TrainingSignals]:
    return [_step(tracker, e, loss) for e, loss in enumerate(losses, start=1)]


def test_first_update_has_zero_loss_delta_and_no_infinities() -> None:
    signals = _step(SignalTracker(), 1, val_loss=2.3, val_accuracy=12.0)
    m = signals.metrics
    assert m.loss_delta == 0.0
    assert m.accuracy_delta == 12.0  # previous accuracy starts at 0
    assert m.best_val_loss == 2.3
    assert all(math.isfinite(v) for v in astuple(m))


def test_deltas_between_updates() -> None:
    tracker = SignalTracker()
    _step(tracker, 1, val_loss=2.0, val_accuracy=30.0)
    m = _step(tracker, 2, val_loss=1.5, val_accuracy=34.0).metrics
    assert m.loss_delta == 0.5
    assert m.accuracy_delta == 4.0
    assert (m.epoch, m.global_step, m.train_loss, m.train_accuracy) == (2, 20, 1.6, 35.0)


def test_plateau_counter_counts_small_gains_and_resets_on_threshold() -> None:
    tracker = SignalTracker()
    accuracies = [10.0, 10.25, 10.5, 11.0, 11.0, 11.0]  # deltas: 10, 0.25, 0.25, 0.5, 0, 0
    plateaus = [_step(tracker, e, 1.0, acc).metrics.plateau_epochs for e, acc in enumerate(accuracies, start=1)]
    assert plateaus == [0, 1, 2, 0, 1, 2]  # a gain of exactly 0.5 pp is progress


def test_stabilization_latches_at_epoch_4_at_the_earliest() -> None:
    signals = _run(SignalTracker(), [2.0, 1.99, 1.98, 1.97, 1.96])
    assert [s.metrics.host_stabilized for s in signals] == [0, 0, 0, 1, 1]


def test_stabilization_counter_resets_on_fast_improvement_or_blow_up() -> None:
    # 2.0 -> 1.0 is a 50 % improvement (unstable); 2.5 -> 3.75 is a 1.5x jump (unstable); rises below 1.5x are stable.
    signals = _run(SignalTracker(), [4.0, 3.99, 3.98, 2.0, 1.99, 2.5, 3.75, 3.74, 3.73, 3.72])
    assert [s.metrics.host_stabilized for s in signals] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 1]


def test_relative_improvement_threshold_is_strict() -> None:
    tracker = SignalTracker(stabilization_threshold=0.25, stabilization_epochs=1)
    assert _run(tracker, [4.0, 3.0])[-1].metrics.host_stabilized == 0  # exactly 25 % is not stable
    tracker.reset()
    assert _run(tracker, [4.0, 3.25])[-1].metrics.host_stabilized == 1


def test_latch_stays_set_and_event_is_emitted_once() -> None:
    sink = RecordingSink()
    tracker = SignalTracker(env_id=3, sink=sink)
    signals = _run(tracker, [2.0, 1.99, 1.98, 1.97, 0.5, 9.0, 1.0, 0.99, 0.98, 0.97])
    assert all(s.metrics.host_stabilized == 1 for s in signals[3:])
    assert len(sink.events) == 1
    event = sink.events[0]
    assert event.event_type == TelemetryEventType.HOST_STABILIZED
    assert (event.env_id, event.epoch) == (3, 4)
    assert event.data == {"epoch": 4, "stable_count": 3, "val_loss": 1.97}


def test_no_event_when_sink_does_not_want_it_but_latch_still_sets() -> None:
    sink = RecordingSink(wanted=False)
    tracker = SignalTracker(sink=sink)
    assert _run(tracker, [2.0, 1.99, 1.98, 1.97])[-1].metrics.host_stabilized == 1
    assert sink.events == []


def test_best_values_are_all_time_and_ignore_nan() -> None:
    tracker = SignalTracker()
    for epoch, (loss, acc) in enumerate([(2.0, 40.0), (1.0, 60.0), (3.0, 20.0), (math.nan, math.nan)], start=1):
        m = _step(tracker, epoch, loss, acc).metrics
    assert m.best_val_loss == 1.0
    assert m.best_val_accuracy == 60.0
    assert math.isnan(m.val_loss)  # non-finite inputs propagate as given


def test_histories_keep_last_five_oldest_first_and_window_bounds_storage() -> None:
    tracker = SignalTracker(history_window=6)
    signals = [_step(tracker, e, float(e), float(10 * e)) for e in range(1, 9)]
    assert signals[1].loss_history == (1.0, 2.0)
    assert signals[-1].loss_history == (4.0, 5.0, 6.0, 7.0, 8.0)
    assert signals[-1].accuracy_history == (40.0, 50.0, 60.0, 70.0, 80.0)
    assert tracker.loss_history == (3.0, 4.0, 5.0, 6.0, 7.0, 8.0)
    with pytest.raises(ValueError, match="history_window"):
        SignalTracker(history_window=4)


def _summary(reports: Sequence[SeedStateReport]) -> TrainingSignals:
    return _step(SignalTracker(), 1, 1.0, reports=reports)


def test_summary_seed_prefers_later_stage_over_slot_order() -> None:
    signals = _summary(
        [
            make_report("early", SeedStage.TRAINING, epochs_in_stage=2),
            make_report("late", SeedStage.BLENDING, epochs_in_stage=4, counterfactual=1.5, improvement=0.75),
        ]
    )
    assert signals.seed_stage == SeedStage.BLENDING
    assert (signals.seed_epochs_in_stage, signals.seed_alpha) == (4, 0.5)
    assert (signals.seed_improvement, signals.seed_counterfactual) == (0.75, 1.5)


def test_summary_seed_tie_breaks_alpha_then_lowest_counterfactual_then_seed_id() -> None:
    blending = SeedStage.BLENDING
    higher_alpha = _summary(
        [make_report("early", blending, alpha=0.8, counterfactual=3.0), make_report("mid", blending, alpha=0.4)]
    )
    assert higher_alpha.seed_alpha == 0.8
    lower_c = _summary(
        [make_report("early", blending, counterfactual=3.0), make_report("mid", blending, counterfactual=-1.0)]
    )
    assert lower_c.seed_counterfactual == -1.0
    measured_beats_none = _summary(
        [make_report("early", blending, counterfactual=None), make_report("mid", blending, counterfactual=50.0)]
    )
    assert measured_beats_none.seed_counterfactual == 50.0
    by_id = _summary(
        [
            make_report("early", SeedStage.TRAINING, seed_id="b", epochs_in_stage=1),
            make_report("mid", SeedStage.TRAINING, seed_id="c", epochs_in_stage=2),
            make_report("late", SeedStage.TRAINING, seed_id="a", epochs_in_stage=3),
        ]
    )
    assert by_id.seed_epochs_in_stage == 2


def test_summary_counts_fossilized_seeds_and_none_counterfactual_reads_zero() -> None:
    signals = _summary(
        [
            make_report("early", SeedStage.FOSSILIZED, counterfactual=2.0),
            make_report("late", SeedStage.PROBATIONARY, counterfactual=9.0),
        ]
    )
    assert signals.seed_stage == SeedStage.FOSSILIZED
    assert _summary([make_report("mid", SeedStage.TRAINING)]).seed_counterfactual == 0.0
    empty = _summary([])
    assert (empty.seed_stage, empty.seed_alpha, empty.seed_counterfactual, empty.active_seeds) == (0, 0.0, 0.0, ())


def test_slot_lists_follow_canonical_order_whatever_the_dict_order() -> None:
    late, early = make_report("late", SeedStage.TRAINING), make_report("early", SeedStage.TRAINING)
    signals = SignalTracker().update(1, 0, 1.0, 1.0, 1.0, 1.0, {"late": late, "early": early}, ["mid"])
    assert signals.active_seeds == ("seed-early", "seed-late")
    assert SignalTracker().update(1, 0, 1.0, 1.0, 1.0, 1.0, {}, ["late", "early"]).available_slots == ("early", "late")


def test_duplicate_seed_ids_raise() -> None:
    reports = [
        make_report("early", SeedStage.TRAINING, seed_id="x"),
        make_report("mid", SeedStage.TRAINING, seed_id="x"),
    ]
    with pytest.raises(RuntimeError, match="Duplicate seed ids"):
        _summary(reports)


def test_report_under_the_wrong_slot_key_raises() -> None:
    with pytest.raises(ValueError, match="slot_id 'early' but key 'mid'"):
        SignalTracker().update(1, 0, 1.0, 1.0, 1.0, 1.0, {"mid": make_report("early", SeedStage.TRAINING)}, [])


def test_reset_clears_state_and_keeps_config() -> None:
    sink = RecordingSink()
    tracker = SignalTracker(plateau_threshold=2.0, env_id=1, sink=sink)
    _run(tracker, [2.0, 1.99, 1.98, 1.97, 1.96])
    tracker.reset()
    assert tracker.loss_history == () and not tracker.host_stabilized
    first = _step(tracker, 1, 5.0, 1.5).metrics
    assert (first.loss_delta, first.accuracy_delta, first.best_val_loss, first.host_stabilized) == (0.0, 1.5, 5.0, 0)
    assert first.plateau_epochs == 1  # 1.5 < the kept threshold of 2.0
    _run(tracker, [5.0, 4.99, 4.98, 4.97])
    assert len(sink.events) == 2  # the latch can fire again in a new episode
