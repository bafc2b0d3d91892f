"""NissaHub: level filtering, escalation, backend isolation, lifecycle, no shared state."""

from __future__ import annotations

from pathlib import Path

import pytest

from esper.leyline.telemetry import (
    EVENT_MIN_LEVEL,
    TelemetryEvent,
    TelemetryEventType,
    TelemetryLevel,
    TelemetrySink,
)
from esper.nissa import Backend, NissaHub, build_hub

E = TelemetryEventType


class Recorder:
    def __init__(self) -> None:
        self.events: list[TelemetryEvent] = []
        self.closed = 0

    def emit(self, event: TelemetryEvent) -> None:
        self.events.append(event)

    def close(self) -> None:
        self.closed += 1

    def types(self) -> list[TelemetryEventType]:
        return [e.event_type for e in self.events]


class Exploding(Recorder):
    def emit(self, event: TelemetryEvent) -> None:
        raise RuntimeError("disk on fire")

    def close(self) -> None:
        raise OSError("cannot close")


def _hub(level: TelemetryLevel) -> tuple[NissaHub, Recorder]:
    hub = NissaHub(level)
    rec = Recorder()
    hub.add_backend(rec)
    return hub, rec


def test_hub_is_a_telemetry_sink_and_recorder_a_backend() -> None:
    assert isinstance(NissaHub(), TelemetrySink)
    assert isinstance(Recorder(), Backend)
    assert NissaHub().effective_level == TelemetryLevel.NORMAL


@pytest.mark.parametrize("level", list(TelemetryLevel))
def test_level_filtering_forwards_exactly_the_allowed_types(level: TelemetryLevel) -> None:
    hub, rec = _hub(level)
    for etype in E:
        hub.emit(TelemetryEvent(etype))
    expected = [] if level == TelemetryLevel.OFF else [t for t in E if EVENT_MIN_LEVEL[t] <= level]
    assert rec.types() == expected
    assert [t for t in E if hub.wants(t)] == expected


def test_minimal_drops_normal_and_debug_events() -> None:
    hub, rec = _hub(TelemetryLevel.MINIMAL)
    hub.emit(TelemetryEvent(E.EPOCH_COMPLETED))
    hub.emit(TelemetryEvent(E.GRADIENT_STATS))
    hub.emit(TelemetryEvent(E.BATCH_COMPLETED))
    assert rec.types() == [E.BATCH_COMPLETED]


def test_escalation_is_debug_for_exactly_n_ticks() -> None:
    hub, rec = _hub(TelemetryLevel.NORMAL)
    hub.escalate(3, reason="ratio_explosion")
    escalated = rec.events[-1]
    assert escalated.event_type == E.TELEMETRY_ESCALATED
    assert escalated.data == {"epochs": 3, "reason": "ratio_explosion"}
    levels = []
    for _ in range(4):
        levels.append(hub.effective_level)
        hub.tick()
    assert levels == [TelemetryLevel.DEBUG] * 3 + [TelemetryLevel.NORMAL]
    assert hub.effective_level == TelemetryLevel.NORMAL
    assert hub.level == TelemetryLevel.NORMAL


def test_debug_events_flow_only_while_escalated() -> None:
    hub, rec = _hub(TelemetryLevel.NORMAL)
    hub.emit(TelemetryEvent(E.GRADIENT_STATS))
    hub.escalate(1)
    hub.emit(TelemetryEvent(E.GRADIENT_STATS))
    hub.tick()
    hub.emit(TelemetryEvent(E.GRADIENT_STATS))
    assert rec.types() == [E.TELEMETRY_ESCALATED, E.GRADIENT_STATS]


def test_escalation_extends_but_never_shortens() -> None:
    hub, _ = _hub(TelemetryLevel.MINIMAL)
    hub.escalate(5)
    hub.tick()
    hub.escalate(2)  # 4 left > 2: keeps 4
    for _ in range(3):
        hub.tick()
    assert hub.effective_level == TelemetryLevel.DEBUG
    hub.tick()
    assert hub.effective_level == TelemetryLevel.MINIMAL


def test_off_ignores_escalation_and_tick_without_escalation_is_harmless() -> None:
    hub, rec = _hub(TelemetryLevel.OFF)
    hub.escalate(5)
    assert hub.effective_level == TelemetryLevel.OFF
    assert not hub.wants(E.RUN_COMPLETED)
    assert rec.events == []
    quiet, _ = _hub(TelemetryLevel.NORMAL)
    quiet.tick()
    assert quiet.effective_level == TelemetryLevel.NORMAL


def test_escalate_rejects_non_positive_epochs() -> None:
    with pytest.raises(ValueError, match="epochs"):
        NissaHub().escalate(0)


def test_failing_backend_is_isolated_and_reported_once(capsys: pytest.CaptureFixture[str]) -> None:
    hub = NissaHub(TelemetryLevel.NORMAL)
    bad, good = Exploding(), Recorder()
    hub.add_backend(bad)
    hub.add_backend(good)
    for _ in range(3):
        hub.emit(TelemetryEvent(E.BATCH_COMPLETED))
    hub.close()
    assert len(good.events) == 3
    assert good.closed == 1
    err = capsys.readouterr().err
    assert err.count("Exploding") == 1
    assert "disk on fire" in err


def test_close_closes_each_backend_once_and_drops_later_events() -> None:
    rec = Recorder()
    with NissaHub() as hub:
        hub.add_backend(rec)
        hub.emit(TelemetryEvent(E.RUN_COMPLETED))
    hub.close()
    hub.emit(TelemetryEvent(E.RUN_COMPLETED))
    assert rec.closed == 1
    assert len(rec.events) == 1
    with pytest.raises(RuntimeError):
        hub.add_backend(Recorder())


def test_two_hubs_share_no_state() -> None:
    first, rec1 = _hub(TelemetryLevel.NORMAL)
    second, rec2 = _hub(TelemetryLevel.NORMAL)
    first.escalate(2)
    first.emit(TelemetryEvent(E.GRADIENT_STATS))
    second.emit(TelemetryEvent(E.GRADIENT_STATS))
    second.emit(TelemetryEvent(E.EPOCH_COMPLETED))
    assert second.effective_level == TelemetryLevel.NORMAL
    assert rec1.types() == [E.TELEMETRY_ESCALATED, E.GRADIENT_STATS]
    assert rec2.types() == [E.EPOCH_COMPLETED]
    assert first.backends == (rec1,)
    assert second.backends == (rec2,)


def test_build_hub_off_filters_events_but_keeps_files_and_tensorboard(tmp_path: Path) -> None:
    """--telemetry-level off filters events only: events.jsonl exists (empty) and TensorBoard still gets curves."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with build_hub(TelemetryLevel.OFF, tmp_path / "run", console=True, tui=False, tensorboard=True) as hub:
        assert [type(b).__name__ for b in hub.backends] == ["JsonlBackend", "TensorBoardBackend", "ConsoleBackend"]
        assert hub.wants(E.EPOCH_COMPLETED) and not hub.wants(E.SEED_GERMINATED)
        hub.emit(TelemetryEvent(E.EPISODE_COMPLETED, data={"episode": 0, "final_accuracy": 50.0}))
        hub.emit(TelemetryEvent(E.SEED_GERMINATED, data={"blueprint_id": "norm"}))
    assert (tmp_path / "run" / "events.jsonl").read_text() == ""
    acc = EventAccumulator(str(tmp_path / "run" / "tb"))
    acc.Reload()
    assert "episode/final_accuracy" in acc.Tags()["scalars"]


class Always(Recorder):
    always = frozenset({E.EPOCH_COMPLETED})


@pytest.mark.parametrize("level", list(TelemetryLevel))
def test_always_types_reach_only_their_backend_at_every_level(level: TelemetryLevel) -> None:
    hub, plain = _hub(level)
    always = Always()
    hub.add_backend(always)
    hub.emit(TelemetryEvent(E.EPOCH_COMPLETED))
    hub.emit(TelemetryEvent(E.GRADIENT_STATS))
    passes = level >= TelemetryLevel.NORMAL
    assert always.types() == [E.EPOCH_COMPLETED] + ([E.GRADIENT_STATS] if level == TelemetryLevel.DEBUG else [])
    assert plain.types() == ([E.EPOCH_COMPLETED] if passes else []) + (
        [E.GRADIENT_STATS] if level == TelemetryLevel.DEBUG else [])
    assert hub.wants(E.EPOCH_COMPLETED)


def test_build_hub_wires_jsonl_and_tensorboard(tmp_path: Path) -> None:
    with build_hub(TelemetryLevel.NORMAL, tmp_path, console=False, tui=False, tensorboard=True) as hub:
        names = [type(b).__name__ for b in hub.backends]
        hub.emit(TelemetryEvent(E.RUN_COMPLETED))
    assert names == ["JsonlBackend", "TensorBoardBackend"]
    assert (tmp_path / "events.jsonl").read_text().count("\n") == 1
    assert any((tmp_path / "tb").iterdir())


def test_build_hub_refuses_console_and_tui_together(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exclusive"):
        build_hub(TelemetryLevel.NORMAL, tmp_path, console=True, tui=True, tensorboard=False)
