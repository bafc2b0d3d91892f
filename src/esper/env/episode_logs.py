"""episodes.jsonl and steps.jsonl read together, as whole episodes: the units of work `esper.storage.logcut` cuts
an episode run's logs back to.

An episode is one controller's episode, keyed (controller, episode index). It is whole when its result row is
logged once and so is every one of its steps: one row per decision, and the result counts its decisions
(`EpisodeResult.decisions`), so a torn or lost step row is seen even when the result row made it to the disk.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.env.logs import EpisodeResult, StepRow
from esper.storage.logcut import UnitLog
from esper.storage.rows import as_row

__all__ = ["EpisodeKey", "EpisodeLogs", "episode_key"]

EpisodeKey = tuple[Any, Any]
"""(controller label, episode index) of a row (either may be None in a row that is not an episode's)."""


def episode_key(row: dict[str, Any]) -> EpisodeKey:
    return row.get("controller"), row.get("episode")


@dataclass(frozen=True)
class EpisodeLogs:
    """A run directory's episode results and steps, as logged."""

    results: UnitLog
    steps: UnitLog
    rows: tuple[EpisodeResult, ...]  # the results, in file order

    @classmethod
    def read(cls, run: Path) -> EpisodeLogs:
        results = UnitLog.read(run / EpisodeResult.FILE, episode_key)
        rows = tuple(as_row(line.value, EpisodeResult, f"{results.path}:{line.number}") for line in results.lines)
        return cls(results, UnitLog.read(run / StepRow.FILE, episode_key), rows)

    def lacking(self, keys: Iterable[EpisodeKey]) -> tuple[UnitLog, EpisodeKey] | None:
        """The first episode of `keys` that is not whole, with the log that lacks (some of) its rows; None when
        every one is whole."""
        check = self._checker()
        return next(((log, key) for key in keys if (log := check(key)) is not None), None)

    def whole(self) -> list[EpisodeResult]:
        """The results of the whole episodes, in file order."""
        check = self._checker()
        return [r for r in self.rows if check((r.controller, r.episode)) is None]

    def _checker(self) -> Callable[[EpisodeKey], UnitLog | None]:
        """key -> the log that lacks rows of that episode, or None when it is whole."""
        decisions = {(r.controller, r.episode): r.decisions for r in self.rows}
        results, steps = self.results.rows_per_unit(), self.steps.rows_per_unit()

        def check(key: EpisodeKey) -> UnitLog | None:
            if results[key] != 1:
                return self.results
            return self.steps if steps[key] != decisions[key] else None
        return check

    def cut(self, keep: Container[EpisodeKey]) -> None:
        """Both logs with only the rows of the episodes in `keep`."""
        self.results.cut(keep)
        self.steps.cut(keep)
