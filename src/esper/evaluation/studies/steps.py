"""A study's phases: each a small object that names the study state it reads and writes and what it costs, and the
kinds of study (one task, a task family) that fill in the phases of the one order every study runs
(`runner.phase_order`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from esper.evaluation.studies.result import StudyResult, StudyStatus
from esper.runtime.rundir import RunDirectory

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


class Study:
    """A kind of study: the phases it runs of the order (None where it runs none of that kind), the state it holds
    before any phase runs (`given`), and its result. Subclasses open the study directory when they are built."""

    runs: int
    directory: RunDirectory
    fresh: bool  # the directory was made by this call (bad input removes it again)
    given: tuple[str, ...] = ()

    def precheck(self) -> StudyPhase | None:
        return None

    def selection(self) -> StudyPhase | None:
        return None

    def teacher_choice(self) -> StudyPhase | None:
        return None

    def policy_setting(self) -> StudyPhase | None:
        return None

    def training(self, run: int) -> StudyPhase | None:
        return None

    def replay_source(self, run: int) -> StudyPhase | None:
        return None

    def evaluation(self) -> StudyPhase | None:
        return None

    def report(self) -> StudyPhase | None:
        return None

    def result(self, status: StudyStatus, phase: str | None) -> StudyResult:
        """What the study holds once it ended with `status` (in `phase`, where it ended early)."""
        raise NotImplementedError


def check_order(phases: Sequence[StudyPhase], given: Sequence[str]) -> None:
    """Refuse an order in which a phase reads what neither the study's `given` state nor an earlier phase holds."""
    known = set(given)
    for phase in phases:
        missing = [name for name in phase.inputs if name not in known]
        if missing:
            raise ValueError(f"Study phase '{phase.name}' reads {', '.join(missing)}, which no earlier phase writes")
        known.update(phase.outputs)
