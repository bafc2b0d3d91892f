"""Evaluation: controllers compared head to head on paired seeds, with the statistics that make the verdicts, and
studies (`run_study(StudyPlan(...))`, loaded on first use so that importing one evaluation module stays light)."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from esper.evaluation.studies import StudyHooks, StudyPhase, StudyPlan, StudyResult, StudyStatus, run_study

__all__ = ["StudyHooks", "StudyPhase", "StudyPlan", "StudyResult", "StudyStatus", "run_study"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("esper.evaluation.studies"), name)
    raise AttributeError(f"module 'esper.evaluation' has no attribute {name!r}")
