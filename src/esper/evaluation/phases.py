"""A study's paired-episode phases: each selection round, replay source and evaluation is one comparison in a run
directory of its own.

The study logic (what each phase compares, on which seeds, in which directory) lives in `esper.evaluation`; running
a phase needs a telemetry hub and a run directory opened with the command's arguments, so the command line hands
the study a `PhaseRunner` that does exactly that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.results import ComparisonResult

__all__ = ["Phase", "PhaseRunner"]


@dataclass(frozen=True)
class Phase:
    """One paired-episode phase: `specs` (named `labels`) on `seeds` paired episodes of `plan`, in `path`;
    `match` names the controllers static:matched is widened to."""

    name: str
    path: Path
    plan: EpisodePlan
    specs: list[str]
    labels: list[str]
    seeds: int
    match: list[str] | None = None


PhaseRunner = Callable[[Phase], ComparisonResult]
"""Runs (or continues) a phase in its directory and returns its comparison."""
