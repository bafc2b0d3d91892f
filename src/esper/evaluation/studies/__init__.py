"""A study as a typed Python call: `run_study(StudyPlan(...)) -> StudyResult`, the phases every study runs in one
order (`runner.phase_order`), and the hooks through which a caller sees its progress and stops it. `esper study` is a
plan built from its flags."""

from esper.evaluation.studies.hooks import PhaseTelemetry, StudyHooks
from esper.evaluation.studies.plan import StudyPlan
from esper.evaluation.studies.result import StudyResult, StudyStatus
from esper.evaluation.studies.runner import phase_order, run_study
from esper.evaluation.studies.steps import StudyPhase

__all__ = ["PhaseTelemetry", "StudyHooks", "StudyPhase", "StudyPlan", "StudyResult", "StudyStatus", "phase_order",
           "run_study"]
