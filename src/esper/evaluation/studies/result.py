"""What `run_study` returns: how the study ended and what it found, as the files in its directory say it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from esper.evaluation.family_policy import PolicyResults
from esper.evaluation.precheck import Precheck
from esper.evaluation.results import ComparisonResult
from esper.evaluation.study import StudyResults
from esper.simic.ppo.config import TrainingConfig

__all__ = ["StudyResult", "StudyStatus"]


class StudyStatus(StrEnum):
    """How a call of `run_study` ended. Every status but REFUSED leaves a study that the same plan continues."""

    COMPLETE = "complete"
    SELECTION_ONLY = "selection only"  # the selection recorded; the same plan without selection_only goes on
    STOPPED = "stopped"  # the caller asked it to stop (`StudyHooks.should_stop`, Ctrl+C on the command line)
    REFUSED = "refused"  # a family's pre-check found too little for a learned controller to win


@dataclass(frozen=True)
class StudyResult:
    """`status` and, where it ended early, the `phase` it ended in; the study directory (`path`), the policies' base
    config (run 0's) and the summary written (None: none yet). A single-task study that finished holds its
    `comparison` of every controller on the evaluation seeds and the `results` reported beside it (per run,
    aggregates, frontier, cost to obtain); a family study its `precheck` and, finished, the `policy` results on the
    held-out types."""

    status: StudyStatus
    phase: str | None
    path: Path
    config: TrainingConfig
    summary: Path | None = None
    comparison: ComparisonResult | None = None
    results: StudyResults | None = None
    precheck: Precheck | None = None
    policy: PolicyResults | None = None
