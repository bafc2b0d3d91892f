"""A study's teacher and its verdicts on the objective: the best rule by the charged gap on the selection seeds, and
every run's final policy against it (and the references) on that objective, raw test accuracy beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from esper.env import EpisodeResult
from esper.evaluation.objective import charged_gaps, objective_scorer
from esper.evaluation.phases import Phase
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import FINAL, INIT, RunLabels
from esper.evaluation.selection import BEST_FIXED, BEST_RULE, Selection
from esper.evaluation.study import StudyObjective, study_results
from esper.evaluation.study_report import summary_markdown
from esper.evaluation.teacher_choice import choose_teacher

RUN = RunLabels(0)


def _episode(controller: str, seed: int, *, test: float, val: float, gflops: float = 1.0, created: int = 0
             ) -> EpisodeResult:
    return EpisodeResult(controller=controller, env_id=0, episode=seed, batch=0, env_seed=seed, host_width=1.0,
                         host_params=1000, final_accuracy=val, final_loss=1.0, twin_final_accuracy=None,
                         twin_final_loss=None, best_accuracy=val, seeds_created=created, seeds_fossilized=0,
                         seeds_culled=0, params_added=0,
                         action_counts={"WAIT": 1, "GERMINATE": 0, "CULL": 0, "FOSSILIZE": 0},
                         accuracy_curve=[val] * 4, total_reward=0.0, rollbacks=0, final_test_accuracy=test,
                         final_test_loss=1.0, train_flops=int(gflops * 1e9))


def _result(rows: dict[str, list[tuple[float, float, float]]]) -> ComparisonResult:
    """Controller → per seed (test, val, GFLOPs)."""
    episodes = [_episode(label, s, test=t, val=v, gflops=g) for label, seeds in rows.items()
                for s, (t, v, g) in enumerate(seeds)]
    return ComparisonResult.from_episodes(list(rows), episodes, tie_threshold=0.01, seed=0)


def test_the_objective_scorer_is_the_charged_gap_per_seed_and_zero_for_static() -> None:
    result = _result({"static": [(70, 60, 1), (71, 61, 1)], "grow": [(73, 62, 1.5), (72, 63, 1.5)]})
    score = objective_scorer(result, "compute", 2.0)
    assert score(result, "static") == [0.0, 0.0]
    assert score(result, "grow") == pytest.approx(charged_gaps(result, "compute", 2.0)["grow"]["per_seed"])
    assert score(result, "grow") == pytest.approx([3.0 - 1.0, 1.0 - 1.0])


def test_a_final_policy_is_measured_against_its_teacher_on_the_objective_it_learned() -> None:
    """The final policy has the teacher's test accuracy plus 1 pp but spends 50 % more compute: on raw accuracy it
    beats its teacher, on the compute-charged objective (λ 4) it loses 1 pp."""
    flat = [(70.0, 60.0, 1.0)] * 3
    result = _result({"static": flat, "heuristic": [(72.0, 62.0, 1.0)] * 3,
                      RUN.init: [(72.0, 62.0, 1.0)] * 3, RUN.final: [(73.0, 63.0, 1.5)] * 3})
    study = study_results(result, 1, chosen={}, selection=None, training=[{"env_epochs": 1, "gflops": 1.0}],
                          replay_sources=[{"env_epochs": 0, "gflops": 0.0}], teacher="heuristic",
                          objective=StudyObjective("compute", 4.0))
    raw = {(a["x"], a["y"]): a["mean"] for a in study.aggregate}
    assert raw[(FINAL, "heuristic")] == pytest.approx(1.0) and raw[(FINAL, INIT)] == pytest.approx(1.0)
    assert study.objective is not None
    charged = {(a["x"], a["y"]): a["mean"] for a in study.objective["aggregate"]}
    assert charged[(FINAL, "heuristic")] == pytest.approx(1.0 - 4.0 * 0.5)
    assert study.objective["per_run"][0]["final_objective"] == pytest.approx(3.0 - 2.0)
    summary = summary_markdown(result, study, title="t", command="esper study")
    assert "Did it improve on its teacher (heuristic)?" in summary and "On the objective" in summary


def test_a_teacher_outside_the_references_is_measured_too() -> None:
    flat = [(70.0, 60.0, 1.0)] * 2
    result = _result({"static": flat, "grow:norm@early": flat, RUN.init: flat, RUN.final: flat})
    study = study_results(result, 1, chosen={}, selection=None, training=[{"env_epochs": 1, "gflops": 1.0}],
                          replay_sources=[{"env_epochs": 0, "gflops": 0.0}], teacher="grow:norm@early")
    assert "grow:norm@early" in study.per_run[0]["deltas"]
    assert any(a["y"] == "grow:norm@early" for a in study.aggregate)


def test_the_teacher_is_the_best_candidate_by_the_objective_on_the_selection_seeds(tmp_path: Path) -> None:
    """Best-rule has the best validation accuracy but spends twice the compute; the heuristic wins on the objective.
    Episodes of 3 epochs are too short to tune, so the choice is between the two."""
    from esper.evaluation.study import selection_plan
    from esper.simic.ppo.config import TrainingConfig

    plan = selection_plan(TrainingConfig.preset("quick").with_overrides(max_epochs=3, device="cpu"))
    ran: list[Phase] = []

    def run_phase(phase: Phase) -> ComparisonResult:
        ran.append(phase)
        return _result({"static": [(70, 60, 1)] * 2, "heuristic": [(71, 62, 1.2)] * 2,
                        BEST_RULE: [(72, 64, 2.0)] * 2})

    selection = Selection([], {BEST_FIXED: "fixed:norm@early", BEST_RULE: "grow:norm@early"})
    choice = choose_teacher(plan, tmp_path, 2, selection, run_phase, StudyObjective("compute", 3.0))
    assert [p.specs for p in ran] == [["static", "heuristic", "grow:norm@early"]]
    assert choice.tuned_path is None  # 3-epoch episodes: no threshold matters
    assert choice.scores == pytest.approx({"heuristic": 2.0 - 0.6, BEST_RULE: 4.0 - 3.0})
    assert (choice.label, choice.spec) == ("heuristic", "heuristic")
    assert choice.cost["env_epochs"] == 2 * 2 * 4  # the candidates' episodes (static is every phase's baseline)
