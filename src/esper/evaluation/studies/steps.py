"""A study's phases: each a small object that names the study state it reads and writes and what it costs, and the
kinds of study (one task, a task family) that fill in the phases of the one order every study runs
(`runner.phase_order`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from esper.evaluation.studies.result import StudyResult, StudyStatus
from esper.storage.rundir import RunDirectory

__all__ = ["Study", "StudyPhase", "check_order"]


@dataclass(frozen=True)
class StudyPhase:
    """One phase: its name, the state it reads (`inputs`) and writes (`outputs`), its cost in env-epochs where the
    plan alone fixes it (None: earlier phases decide it, e.g. how many selection rounds run), and its work (`run`:
    None to go on, or the status the study ends with). A phase continues whatever an earlier call finished of it."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    cost: int | None
    run: Callable[[], StudyStatus | None]


class Study(ABC):
    """A kind of study: the phases it runs of the order (None where it runs none of that kind: every study selects,
    sets its policies, trains them (unless they are given), reads their replays, evaluates and reports), the state it
    holds before any phase runs (`given`), and its result. Subclasses open the study directory when they are built."""

    runs: int
    directory: RunDirectory
    fresh: bool  # the directory was made by this call (bad input removes it again)
    given: tuple[str, ...] = ()

    def precheck(self) -> StudyPhase | None:
        """A family's pre-check; a study on one task has none."""
        return None

    @abstractmethod
    def selection(self) -> StudyPhase: ...

    def teacher_choice(self) -> StudyPhase | None:
        """The policies' teacher, chosen on the selection seeds; a family study trains on its preset's."""
        return None

    @abstractmethod
    def policy_setting(self) -> StudyPhase: ...

    @abstractmethod
    def training(self, run: int) -> StudyPhase | None: ...

    @abstractmethod
    def replay_source(self, run: int) -> StudyPhase: ...

    @abstractmethod
    def evaluation(self) -> StudyPhase: ...

    @abstractmethod
    def report(self) -> StudyPhase: ...

    @abstractmethod
    def result(self, status: StudyStatus, phase: str | None) -> StudyResult:
        """What the study holds once it ended with `status` (in `phase`, where it ended early)."""


def check_order(phases: Sequence[StudyPhase], given: Sequence[str]) -> None:
    """Refuse an order in which a phase reads what neither the study's `given` state nor an earlier phase holds."""
    known = set(given)
    for phase in phases:
        missing = [name for name in phase.inputs if name not in known]
        if missing:
            raise ValueError(f"Study phase '{phase.name}' reads {', '.join(missing)}, which no earlier phase writes")
        known.update(phase.outputs)
