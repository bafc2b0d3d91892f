"""Progress with an ETA for every long command, counted in env-epochs (one env finishing one epoch).

The command announces each phase (`start`: what, how many env-epochs in all, how many are already done after a
resume, and how many envs advance together); the tracker then counts EPOCH_COMPLETED events, which it receives at
every telemetry level. The ETA uses this session's rate over whole lock-step rounds only, since the envs of a
round finish together and a half-counted round would make the rate look too slow.

Three displays read the same state: the TUI header (`snapshot()`), a rich progress bar on a terminal without the
TUI, and on anything else (CI logs, files) one plain line at the first completed round, then at most every
`interval` seconds, and at the end of a phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.text import Text

from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType

__all__ = ["PROGRESS_INTERVAL_S", "ProgressBackend", "ProgressSnapshot", "format_duration"]

PROGRESS_INTERVAL_S = 30.0
ProgressMode = Literal["bar", "lines", "none"]


def format_duration(seconds: float | None) -> str:
    """`h:mm:ss`, or "—" while unknown."""
    if seconds is None:
        return "—"
    total = max(0, round(seconds))
    return f"{total // 3600:d}:{total // 60 % 60:02d}:{total % 60:02d}"


@dataclass(frozen=True)
class ProgressSnapshot:
    """Where a phase stands; `eta_s` is None until a whole round has been timed."""

    description: str
    done: int
    total: int
    elapsed_s: float
    eta_s: float | None
    unit: str = "env-epochs"

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total > 0 else 0.0

    def line(self) -> str:
        return (f"progress: {self.description} {self.done}/{self.total} {self.unit} ({100 * self.fraction:.0f}%) · "
                f"elapsed {format_duration(self.elapsed_s)} · ETA {format_duration(self.eta_s)}")


class ProgressBackend:
    """Counts env-epochs of the current phase and shows them in the chosen `mode` ("none": the TUI shows them)."""

    always = frozenset({TelemetryEventType.EPOCH_COMPLETED, TelemetryEventType.IQL_EPOCH_COMPLETED})

    def __init__(self, mode: ProgressMode, console: Console | None = None, *, interval: float = PROGRESS_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.mode = mode
        self.console = console if console is not None else Console()
        self.interval = interval
        self._clock = clock
        self._description = ""
        self._unit = "env-epochs"
        self._total = self._done = self._first = 0
        self._round = 1
        self._started = self._last_line = clock()
        self._printed = False
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def start(self, description: str, total: int, *, done: int = 0, round_size: int = 1,
              unit: str = "env-epochs") -> None:
        """A new phase of `total` env-epochs (or IQL training epochs), `done` of them finished before this session."""
        self._description, self._total, self._done, self._first = description, total, done, done
        self._unit = unit
        self._round = max(1, round_size)
        self._started = self._last_line = self._clock()
        self._printed = False
        if self.mode == "bar":
            if self._bar is None:
                self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[unit]} · {task.fields[times]}"), console=self.console)
                self._bar.start()
            if self._task is not None:
                self._bar.remove_task(self._task)
            self._task = self._bar.add_task(description, total=total, completed=done, times=self._times(), unit=unit)

    def snapshot(self) -> ProgressSnapshot:
        elapsed = self._clock() - self._started
        timed = (self._done - self._first) // self._round * self._round  # whole rounds only
        eta = (self._total - self._done) * elapsed / timed if timed > 0 and elapsed > 0 else None
        return ProgressSnapshot(self._description, self._done, self._total, elapsed, eta, self._unit)

    def _times(self) -> str:
        s = self.snapshot()
        return f"elapsed {format_duration(s.elapsed_s)} · ETA {format_duration(s.eta_s)}"

    def emit(self, event: TelemetryEvent) -> None:
        if event.event_type not in self.always or self._total == 0:
            return
        self._advance(self._done + 1)

    def phase(self, description: str, done: int, total: int, unit: str = "steps") -> None:
        """Progress of a phase that emits no events (distilling a policy, fitting an estimator): a new description
        starts the phase (and its clock), the same one moves it to `done` of `total`."""
        if description != self._description or total != self._total:
            self.start(description, total, done=done, unit=unit)
            if self.mode == "lines":
                self._maybe_print()
        elif done != self._done:
            self._advance(done)

    def _advance(self, done: int) -> None:
        self._done = done
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self._done, times=self._times())
        elif self.mode == "lines":
            self._maybe_print()

    def _maybe_print(self) -> None:
        at_round_end = (self._done - self._first) % self._round == 0
        now = self._clock()
        due = not self._printed or now - self._last_line >= self.interval or self._done >= self._total
        if (at_round_end and due) or self._done == self._total:
            stamp = time.strftime("%H:%M:%S")
            self.console.print(Text(f"[{stamp}] ", style="dim") + Text(self.snapshot().line()), soft_wrap=True)
            self._printed, self._last_line = True, now

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
