"""TolariaGovernor vital-sign rules, events and rollback bookkeeping."""

from __future__ import annotations

import math

import pytest
import torch

from esper.data.optim import OptimizerSpec
from esper.kasmina.hosts import CNNHost
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.state import LifecycleConfig
from esper.leyline import TelemetryEvent, TelemetryEventType
from esper.tolaria import GovernorReport, TolariaGovernor, TrainState

LN10 = math.log(10)
LN257 = math.log(257)
STABLE = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.03, 0.97, 1.0, 1.0]  # mean 1.0, σ ≈ 0.017


def _governor(events: list[TelemetryEvent] | None = None, **kwargs: float) -> TolariaGovernor:
    return TolariaGovernor(random_guess_loss=LN10, on_event=events.append if events is not None else None,
                           **kwargs)  # type: ignore[arg-type]


def _fill(gov: TolariaGovernor, losses: list[float]) -> None:
    for loss in losses:
        assert gov.check_vital_signs(loss) is False


def _train_state() -> TrainState:
    model = MorphogeneticModel(CNNHost(channels=(8, 16, 32)), slots=["mid"], lifecycle=LifecycleConfig())
    spec = OptimizerSpec(name="sgd", lr=0.01, momentum=0.9)
    return TrainState(model, spec, spec, "classification", torch.device("cpu"))


def test_random_guess_loss_is_required_and_positive() -> None:
    with pytest.raises(TypeError):
        TolariaGovernor()  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="random_guess_loss"):
        TolariaGovernor(random_guess_loss=0.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_loss_panics_immediately_and_is_not_appended(bad: float) -> None:
    gov = _governor()
    assert gov.check_vital_signs(bad) is True  # even with an empty history
    assert len(gov.loss_history) == 0
    _fill(gov, STABLE)
    assert gov.check_vital_signs(bad) is True
    assert list(gov.loss_history) == STABLE


@pytest.mark.parametrize("guess", [LN10, LN257])
def test_lobotomy_panics(guess: float) -> None:
    """History ≥ 10 with mean < 0.6·L, then a loss within 6.5 % of L: panic, not appended."""
    gov = TolariaGovernor(random_guess_loss=guess)
    history = [0.5 * guess] * 10
    _fill(gov, history)
    assert gov.check_vital_signs(guess * 1.06) is True
    assert gov.check_vital_signs(guess * 0.94) is True
    assert list(gov.loss_history) == history
    assert gov.check_vital_signs(guess * 1.07) is False  # outside the 6.5 % band, not a spike either
    assert len(gov.loss_history) == 11


@pytest.mark.parametrize("guess", [LN10, LN257])
def test_no_lobotomy_when_history_mean_is_high_or_short(guess: float) -> None:
    gov = TolariaGovernor(random_guess_loss=guess)
    _fill(gov, [0.61 * guess] * 10)  # mean ≥ 0.6·L: the model never learned, a random-guess loss is normal
    assert gov.check_vital_signs(guess) is False
    short = TolariaGovernor(random_guess_loss=guess)
    _fill(short, [0.1 * guess] * 9)
    assert short.check_vital_signs(guess) is False  # < 10 entries


def test_fewer_than_ten_samples_never_panic() -> None:
    gov = _governor(min_panics_before_rollback=1)
    _fill(gov, [1.0, 1.0, 1.0, 1.0, 1000.0, 1.0, 1.0, 1.0, 5000.0])
    assert len(gov.loss_history) == 9 and gov.consecutive_panics == 0


def test_thirty_stable_epochs_never_panic() -> None:
    gov = _governor(min_panics_before_rollback=1)
    g = torch.Generator().manual_seed(0)
    losses = [2.3 * math.exp(-0.1 * e) + 0.3 + 0.05 * float(torch.randn((), generator=g)) for e in range(30)]
    _fill(gov, losses)
    assert gov.consecutive_panics == 0 and list(gov.loss_history) == losses[-20:]  # window of 20


def test_spike_after_stable_history_panics_with_one_required_panic() -> None:
    events: list[TelemetryEvent] = []
    gov = _governor(events, min_panics_before_rollback=1)
    _fill(gov, STABLE)
    assert gov.check_vital_signs(50.0) is True
    assert list(gov.loss_history) == STABLE  # anomalies are not appended
    assert gov.consecutive_panics == 1
    panic = [e for e in events if e.event_type == TelemetryEventType.GOVERNOR_PANIC]
    assert len(panic) == 1 and panic[0].severity == "warning"
    assert {"loss", "consecutive_panics", "reason"} <= set(panic[0].data)
    assert panic[0].data["loss"] == 50.0 and panic[0].data["consecutive_panics"] == 1


def test_default_needs_three_consecutive_anomalies_and_a_normal_loss_resets() -> None:
    gov = _governor()
    assert gov.min_panics_before_rollback == 3
    _fill(gov, STABLE)
    assert [gov.check_vital_signs(50.0) for _ in range(2)] == [False, False]
    assert gov.consecutive_panics == 2
    assert gov.check_vital_signs(1.0) is False  # normal: appended, counter reset
    assert gov.consecutive_panics == 0 and len(gov.loss_history) == 11
    assert [gov.check_vital_signs(50.0) for _ in range(3)] == [False, False, True]
    assert len(gov.loss_history) == 11


def test_absolute_threshold_guards_small_spikes() -> None:
    """11.9 is > 3·mean and > mean + 6σ but ≤ 12.0: not an anomaly (appended, no counter)."""
    gov = _governor(min_panics_before_rollback=1)
    _fill(gov, STABLE)
    assert gov.check_vital_signs(11.9) is False
    assert gov.consecutive_panics == 0 and gov.loss_history[-1] == 11.9
    low = _governor(min_panics_before_rollback=1, absolute_threshold=5.0)
    _fill(low, STABLE)
    assert low.check_vital_signs(11.9) is True


def test_all_three_conditions_are_required() -> None:
    gov = _governor(min_panics_before_rollback=1)
    _fill(gov, [5.0, 6.0] * 5)  # mean 5.5, σ 0.5: statistical bound 8.5, multiplier bound 16.5
    assert gov.check_vital_signs(16.0) is False  # above 12 and mean + 6σ, below 3·mean
    noisy = _governor(min_panics_before_rollback=1)
    _fill(noisy, [1.0, 9.0] * 5)  # mean 5, σ 4: statistical bound 29
    assert noisy.check_vital_signs(20.0) is False  # above 12 and 3·mean, below mean + 6σ


def test_snapshot_and_rollback_events_and_reset() -> None:
    events: list[TelemetryEvent] = []
    gov = _governor(events)
    ts = _train_state()
    gov.snapshot(ts, epoch=5, bookkeeping={"acc_at_germination": {"mid": 42.0}})
    snap = [e for e in events if e.event_type == TelemetryEventType.GOVERNOR_SNAPSHOT]
    assert len(snap) == 1 and snap[0].data == {"epoch": 5} and snap[0].severity == "debug"
    _fill(gov, STABLE)
    assert [gov.check_vital_signs(60.0) for _ in range(3)] == [False, False, True]
    report = gov.execute_rollback(ts)
    assert isinstance(report, GovernorReport)
    assert report.rollback_occurred and report.restored_epoch == 5 and report.reason == "loss_spike"
    assert report.loss_at_panic == 60.0 and report.loss_threshold >= 12.0
    assert report.restored_bookkeeping == {"acc_at_germination": {"mid": 42.0}}
    assert len(gov.loss_history) == 0 and gov.consecutive_panics == 0
    rollback = [e for e in events if e.event_type == TelemetryEventType.GOVERNOR_ROLLBACK]
    assert len(rollback) == 1 and rollback[0].severity == "critical"
    assert {"reason", "loss_at_panic", "loss_threshold", "restored_epoch"} <= set(rollback[0].data)
    assert rollback[0].data["restored_epoch"] == 5 and rollback[0].data["loss_at_panic"] == 60.0
    # After the rollback the history must be rebuilt: 9 more samples never panic.
    _fill(gov, [1.0] * 8 + [500.0])


def test_rollback_after_nan_reports_non_finite_reason() -> None:
    gov = _governor()
    ts = _train_state()
    gov.snapshot(ts, epoch=0)
    assert gov.check_vital_signs(math.nan)
    report = gov.execute_rollback(ts)
    assert report.reason == "non_finite_loss" and math.isnan(report.loss_at_panic) and report.restored_epoch == 0


def test_rollback_without_snapshot_raises() -> None:
    with pytest.raises(RuntimeError, match="snapshot"):
        _governor().execute_rollback(_train_state())


@pytest.mark.parametrize(("history", "bad"), [(STABLE, 50.0), (STABLE, math.nan), ([0.5 * LN10] * 10, LN10)],
                         ids=["loss_spike", "non_finite", "lobotomy"])
def test_snapshot_is_refused_until_a_vital_check_passes_again(history: list[float], bad: float) -> None:
    events: list[TelemetryEvent] = []
    gov = _governor(events, min_panics_before_rollback=3)
    ts = _train_state()
    assert gov.snapshot(ts, epoch=0)  # a fresh environment is the reference state
    _fill(gov, history)
    gov.check_vital_signs(bad)
    assert gov.snapshot(ts, epoch=5) is False and gov.snapshot(ts, epoch=5) is False
    _fill(gov, [history[0]])
    assert gov.snapshot(ts, epoch=6)
    taken = [e.epoch for e in events if e.event_type == TelemetryEventType.GOVERNOR_SNAPSHOT]
    assert taken == [0, 6]
    gov.check_vital_signs(bad)
    assert gov.execute_rollback(ts).restored_epoch == 6  # not 5: that state was never stored
    assert gov.snapshot(ts, epoch=7)  # the restored state is a stored, healthy one


def test_a_second_rollback_to_one_snapshot_restores_the_same_optimizer_state() -> None:
    """The steps after a rollback must not write into the snapshot: the next rollback restores it as it was taken."""
    gov = _governor()
    ts = _train_state()
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])

    def step() -> None:
        ts.host_optimizer.zero_grad()
        torch.nn.functional.cross_entropy(ts.model(x), y).backward()
        ts.host_optimizer.step()

    step()  # momentum buffers exist from here on
    gov.snapshot(ts, epoch=1)
    taken = {k: v["momentum_buffer"].clone() for k, v in ts.host_optimizer.state_dict()["state"].items()}
    for _ in range(2):
        assert gov.check_vital_signs(math.nan)
        gov.execute_rollback(ts)
        restored = ts.host_optimizer.state_dict()["state"]
        assert all(torch.equal(restored[k]["momentum_buffer"], v) for k, v in taken.items())
        step()
        step()
