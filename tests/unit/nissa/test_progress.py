"""Progress with an ETA: counted in env-epochs from EPOCH_COMPLETED, timed over whole lock-step rounds, shown as
periodic plain lines without a terminal."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType, TelemetryLevel
from esper.nissa import NissaHub, ProgressBackend
from esper.nissa.progress import format_duration

E = TelemetryEventType


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _backend(mode: str = "lines", interval: float = 30.0) -> tuple[ProgressBackend, Clock, io.StringIO]:
    clock, out = Clock(), io.StringIO()
    backend = ProgressBackend(mode, Console(file=out, width=200, color_system=None),  # type: ignore[arg-type]
                              interval=interval, clock=clock)
    return backend, clock, out


def _epoch() -> TelemetryEvent:
    return TelemetryEvent(E.EPOCH_COMPLETED, env_id=0, data={"epoch": 1})


@pytest.mark.parametrize(("seconds", "text"), [(None, "—"), (0.4, "0:00:00"), (61, "0:01:01"), (3725, "1:02:05")])
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


def test_eta_counts_whole_rounds_of_this_session_only() -> None:
    progress, clock, _ = _backend("none")
    progress.start("training", 40, done=8, round_size=4)  # a resumed run: 8 env-epochs were done before
    clock.now += 10
    for _ in range(3):
        progress.emit(_epoch())
    assert progress.snapshot().eta_s is None  # a round is not finished: its envs are still training together
    progress.emit(_epoch())
    snap = progress.snapshot()
    assert (snap.done, snap.total) == (12, 40)
    assert snap.eta_s == pytest.approx(28 * 10 / 4)  # 28 left at 4 per 10 s
    assert snap.fraction == pytest.approx(0.3)


def test_lines_mode_prints_first_round_then_per_interval_and_the_end() -> None:
    progress, clock, out = _backend("lines", interval=30)
    progress.start("episodes", 6, round_size=2)
    for _ in range(6):
        clock.now += 5
        progress.emit(_epoch())
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # after the first round, then at 100 % (less than 30 s in between)
    assert re.fullmatch(r"\[\d\d:\d\d:\d\d\] progress: episodes 2/6 env-epochs \(33%\) · elapsed 0:00:10 · "
                        r"ETA 0:00:20", lines[0])
    assert "6/6 env-epochs (100%)" in lines[1] and "ETA 0:00:00" in lines[1]


def test_lines_mode_prints_at_most_once_per_interval() -> None:
    progress, clock, out = _backend("lines", interval=30)
    progress.start("training", 1000, round_size=1)
    for _ in range(100):
        clock.now += 1
        progress.emit(_epoch())
    assert len(out.getvalue().splitlines()) == 4  # t = 1 s, 31 s, 61 s, 91 s


def test_progress_counts_epochs_at_every_telemetry_level() -> None:
    for level in TelemetryLevel:
        hub = NissaHub(level)
        progress, _, _ = _backend("none")
        hub.add_backend(progress)
        progress.start("x", 3)
        hub.emit(_epoch())
        assert progress.snapshot().done == 1, level


def test_bar_mode_runs_and_closes() -> None:
    progress, _, out = _backend("bar")
    progress.start("training", 4, round_size=2)
    for _ in range(4):
        progress.emit(_epoch())
    progress.start("evaluation", 2)
    progress.emit(_epoch())
    progress.close()
    assert "evaluation" in out.getvalue()


def test_a_phase_without_events_shows_progress_and_gives_the_next_phase_a_clock_of_its_own() -> None:
    """A distillation before training: its steps show with an ETA, and training's ETA does not count its time."""
    progress, clock, out = _backend("lines", interval=30)
    progress.start("training", 100)
    for step in range(0, 2001, 20):
        progress.phase("distilling the IQL policy", step, 2000)
        clock.now += 6  # 10 minutes of distillation in all
    lines = out.getvalue().splitlines()
    assert "distilling the IQL policy 0/2000 steps" in lines[0]
    assert "2000/2000 steps (100%)" in lines[-1] and 1 < len(lines) < 40  # about every 30 s
    progress.phase("training", 0, 100, unit="env-epochs")
    clock.now += 10
    for _ in range(10):
        progress.emit(_epoch())
    snap = progress.snapshot()
    assert snap.description == "training" and snap.elapsed_s == pytest.approx(10)
    assert snap.eta_s == pytest.approx(90)  # 90 left at 10 per 10 s: the distillation's minutes are not in it
