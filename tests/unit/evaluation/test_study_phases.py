"""The one phase order: a study on one task and a study across a family run their phases in it, each leaving out
what it does not run; an order in which a phase reads what no earlier phase writes is refused; a plan is checked
when it is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from esper.evaluation.studies import StudyPlan, phase_order
from esper.evaluation.studies.family import FamilyStudy
from esper.evaluation.studies.steps import StudyPhase, check_order
from esper.evaluation.studies.task import TaskStudy
from esper.leyline.errors import UserInputError
from unit.evaluation.family_probe import FAMILY

TRAINING = ["training run 0", "training run 1", "replay source of run 0", "replay source of run 1", "evaluation",
            "report"]


def test_a_task_study_and_a_family_study_run_their_phases_in_the_one_order(tmp_path: Path) -> None:
    task = TaskStudy(StudyPlan(preset="quick", runs=2, run_dir=tmp_path / "task",
                               overrides={"device": "cpu", "param_cost": 1.0}))
    phases = phase_order(task)
    assert [p.name for p in phases] == ["selection", "teacher choice", "policy setting", *TRAINING]
    check_order(phases, task.given)
    assert phases[0].cost == 0 and phases[3].cost == task.config.ppo.total_episodes() * task.config.episode.max_epochs
    family = FamilyStudy(StudyPlan(family=FAMILY.key, runs=2, run_dir=tmp_path / "family",
                                   overrides={"device": "cpu", "max_epochs": 2}))
    phases = phase_order(family)
    assert [p.name for p in phases] == ["pre-check", "selection", "policy setting", *TRAINING]
    check_order(phases, family.given)
    assert (tmp_path / "task" / "config.json").is_file() and (tmp_path / "family" / "config.json").is_file()


def test_an_order_that_reads_what_no_earlier_phase_writes_is_refused() -> None:
    def phase(name: str, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> StudyPhase:
        return StudyPhase(name, inputs, outputs, 0, lambda: None)

    train, evaluate = phase("training", (), ("policy",)), phase("evaluation", ("policy",), ("comparison",))
    check_order([train, evaluate], ())
    check_order([evaluate], ("policy",))  # --ppo: the policies are given
    with pytest.raises(ValueError, match="'evaluation' reads policy, which no earlier phase writes"):
        check_order([evaluate, train], ())


@pytest.mark.parametrize(("fields", "message"), [
    ({"runs": 0}, "runs must be in"), ({"preset": "quik"}, "did you mean 'quick'"),
    ({"tie_threshold": -1.0}, "tie_threshold"), ({"ppo": ()}, "ppo names no run directory"),
])
def test_a_plan_is_checked_when_it_is_made(fields: dict[str, object], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        StudyPlan(**fields)  # type: ignore[arg-type]
