"""`run_study(plan)`: a study as a Python call. The study is opened (the plan checked, its data loaded, its directory
made or continued), then its phases run in the one order every study has; each phase continues whatever an earlier
call finished of it, so calling `run_study` again with the same plan continues an interrupted study."""

from __future__ import annotations

from esper.evaluation.studies.family import FamilyStudy
from esper.evaluation.studies.plan import StudyPlan
from esper.evaluation.studies.result import StudyResult, StudyStatus
from esper.evaluation.studies.steps import Study, StudyPhase, check_order
from esper.evaluation.studies.task import TaskStudy
from esper.storage.rundirs import USER_ERRORS, discard_on_error

__all__ = ["phase_order", "run_study"]


def phase_order(study: Study) -> list[StudyPhase]:
    """Every study's phases, in the order they run: the pre-check (a family's), the selection of the references, the
    teacher's choice, the policies' setting, each training run, each run's replay source, the evaluation and the
    report; a kind of study leaves out what it does not run. A new phase is one more entry here (and its work in the
    kinds of study that run it)."""
    runs = range(study.runs)
    phases = (study.precheck(), study.selection(), study.teacher_choice(), study.policy_setting(),
              *(study.training(r) for r in runs), *(study.replay_source(r) for r in runs), study.evaluation(),
              study.report())
    return [p for p in phases if p is not None]


def run_study(plan: StudyPlan) -> StudyResult:
    """Run (or continue) the study `plan` describes until it completes, stops (`plan.hooks.should_stop`), records
    only its selection (`plan.selection_only`) or is refused by a family's pre-check. Bad input raises UserInputError
    (or OSError) before anything is written; a study directory this call created is removed again when bad input
    ends it before it finished anything."""
    study: Study = FamilyStudy(plan) if plan.family is not None else TaskStudy(plan)
    phases = phase_order(study)
    check_order(phases, study.given)
    with discard_on_error(study.directory, fresh=study.fresh, errors=USER_ERRORS):
        for phase in phases:
            if plan.hooks.should_stop():
                return study.result(StudyStatus.STOPPED, phase.name)
            plan.hooks.phase_started(phase)
            status = phase.run()
            if status is not None:
                return study.result(status, phase.name)
    return study.result(StudyStatus.COMPLETE, None)
