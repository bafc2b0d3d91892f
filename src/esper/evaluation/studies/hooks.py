"""How a study talks to its caller: lines saying what it does, each phase as it starts, every phase directory's
telemetry and progress, a watch around each training run, and whether to stop. The defaults are quiet (nothing
printed, no event log, never stopped): a Python caller sets what it wants (`StudyHooks(note=print)`), the command line
its console, telemetry hub and Ctrl+C."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from esper.evaluation.resume import EventFilter
from esper.evaluation.studies.steps import StudyPhase
from esper.leyline import TelemetrySink
from esper.simic.ppo.config import TrainingConfig
from esper.storage.rundir import RunDirectory

__all__ = ["PhaseTelemetry", "Progress", "StudyHooks", "Telemetry", "TrainingWatch", "no_telemetry"]


class Progress(Protocol):
    """A progress display, told when a phase of `total` units starts (`done` of them finished earlier)."""

    def start(self, description: str, total: int, *, done: int = 0, round_size: int = 1,
              unit: str = "env-epochs") -> None: ...


@dataclass(frozen=True)
class PhaseTelemetry:
    """Where a phase's events go, its progress display, and the progress of work that emits no events (a PPO run's
    own phases: `steps(phase, done, total)`); None: nowhere."""

    sink: TelemetrySink | None = None
    progress: Progress | None = None
    steps: Callable[[str, int, int], None] | None = None


Telemetry = Callable[[RunDirectory, dict[str, Any], EventFilter | None], AbstractContextManager[PhaseTelemetry]]
"""Opens the telemetry of a phase's run directory, given its settings (hparams) and, for a continued directory, which
events of its log the finished work keeps (the rest is cut before the log is opened again); closed when the phase
ends."""
TrainingWatch = Callable[[TrainingConfig, str | None], AbstractContextManager[None]]
"""Entered around each training run's training, with its config and the preset it started from."""


@contextmanager
def no_telemetry(run_dir: RunDirectory, hparams: dict[str, Any], kept: EventFilter | None
                 ) -> Iterator[PhaseTelemetry]:
    """No events, no progress display."""
    yield PhaseTelemetry()


def _unwatched(config: TrainingConfig, preset: str | None) -> AbstractContextManager[None]:
    return nullcontext()


def _ignore(item: Any) -> None:
    """Drops what it is told."""


def _never() -> bool:
    return False


@dataclass(frozen=True)
class StudyHooks:
    """`note`: a line of what the study does (a phase resumed, the choice made, a training run finished);
    `phase_started`: each phase of the order as it starts (with its name and cost); `should_stop`: asked between phases
    and during training (True: the study stops where it can continue from, status STOPPED); `telemetry`: each phase
    directory's events and progress; `training`: around each training run; `telemetry_level`: the level the telemetry
    records events at, recorded in each training run's config.json (None: no event log)."""

    note: Callable[[str], None] = _ignore
    phase_started: Callable[[StudyPhase], None] = _ignore
    should_stop: Callable[[], bool] = _never
    telemetry: Telemetry = no_telemetry
    training: TrainingWatch = _unwatched
    telemetry_level: str | None = None
