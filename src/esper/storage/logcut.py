"""Cutting a run's line logs back to its resume point: the one rule every resumable command follows.

A resumed run must leave the logs an uninterrupted run would have written. Every row of a line log belongs to one
unit of work (a PPO rollout batch, an IQL epoch, one controller's episode), and a resume point is a set of finished
units. A resume keeps the rows of the units its point holds and cuts every other row, a torn last line (a kill
mid-write) included: those units run again and their rows are appended as the first time. A unit the point holds must
be whole in every log (exactly as many rows as it wrote). When one is not, its rows were torn or lost after the point
was saved (a power cut before the page cache reached the disk, a file cut by hand), and what happens depends on
who holds the point:
* an episode run, whose point is read from its own logs, counts the episode as unfinished and runs it again;
* a learner, whose checkpoint has already learned from that unit and cannot run it again, refuses with
  `IncompleteLogError`, naming the file and the fix.
Writers make the refusal rare: a learner's logs reach the disk (`RunDirectory.sync`) before its checkpoint does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.storage.rows import JsonlLine, jsonl_lines
from esper.storage.rundir import RunDirectoryError, write_text_atomic

__all__ = ["IncompleteLogError", "UnitLog"]


class IncompleteLogError(RunDirectoryError):
    """A log lacks rows of work that a checkpoint has already counted as done."""


@dataclass(frozen=True)
class UnitLog:
    """One line log read as units of work: its complete lines and the unit each belongs to."""

    path: Path
    lines: tuple[JsonlLine, ...]
    units: tuple[Hashable, ...]

    @classmethod
    def read(cls, path: Path, unit: Callable[[dict[str, Any]], Hashable]) -> UnitLog:
        """`path`'s complete lines (a torn last line is left out), each with its unit (`unit(row)`; a line that is
        not a JSON object belongs to no unit, so a cut drops it)."""
        lines = tuple(jsonl_lines(path))
        return cls(path, lines, tuple(unit(line.value) if isinstance(line.value, dict) else None for line in lines))

    def rows_per_unit(self) -> Counter[Hashable]:
        return Counter(self.units)

    def first_incomplete(self, expected: Mapping[Hashable, int]) -> Hashable | None:
        """The first unit of `expected` (in its order) that does not have exactly its expected number of rows."""
        counts = self.rows_per_unit()
        return next((unit for unit, rows in expected.items() if counts[unit] != rows), None)

    def cut(self, keep: Container[Hashable]) -> None:
        """Rewrite the log (atomically, each kept line byte for byte) with only the rows of the units in `keep`."""
        if self.path.exists():
            kept = (line.text for line, unit in zip(self.lines, self.units, strict=True) if unit in keep)
            write_text_atomic(self.path, "".join(f"{text}\n" for text in kept))

    def refuse(self, missing: str, checkpoint: Path, run_dir: Path) -> IncompleteLogError:
        """The error for a unit the checkpoint counts as done but this log lacks (`missing` says which)."""
        return IncompleteLogError(
            f"{self.path} lacks {missing} (its line is torn or missing), but {checkpoint} has already learned from "
            f"it, so it cannot be run again: start the run over with --overwrite (in place of any --resume), or "
            f"delete {run_dir} and rerun the command that started it (on CPU a fixed-seed run writes the same logs "
            f"again)")
