"""A study's teacher: the best rule it knows, chosen on the selection seeds by the objective its policies learn.

The candidates are the heuristic, the heuristic tuned on the selection seeds (`heuristic:tuned`, by optuna TPE within
the env-epochs best-rule's search cost, so the two searches are equal; not where episodes are too short for any
threshold to matter) and best-rule. Each is scored by its charged
gap to static on the selection seeds' final validation accuracy — the objective the policies' reward measures — and
the best becomes the teacher every training run starts from. Nothing here sees an evaluation seed or the test split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.objective import charged_gaps
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import Cost, add_costs, episodes_cost
from esper.evaluation.selection import BEST_RULE, Selection, search_cost
from esper.evaluation.study import TUNED_HEURISTIC, StudyObjective
from esper.evaluation.tuning import ObjectiveSpec, tune_heuristic
from esper.evaluation.tuning_space import SearchSpace

__all__ = ["TeacherChoice", "choose_teacher", "objective_spec", "with_tuned"]

STATIC = "static"


def objective_spec(objective: StudyObjective) -> ObjectiveSpec:
    """The tuner's objective: each controller's mean charged gap to static on the selection seeds' validation."""

    def score(result: ComparisonResult) -> Mapping[str, float]:
        return {label: gap["mean_delta"]
                for label, gap in charged_gaps(result, objective.charge, objective.cost, split="val").items()}

    return ObjectiveSpec(f"charged_gap_{objective.charge}", score, charge=objective.charge, cost=objective.cost)


@dataclass(frozen=True)
class TeacherChoice:
    """The chosen teacher (its label and the spec a training run names it by), every candidate's score, the tuned
    heuristic's record file and what its search cost (None: episodes too short to tune), and what the choice cost
    beyond the selection (the tuning and the candidates' scoring episodes)."""

    label: str
    spec: str
    scores: dict[str, float]
    tuned_path: Path | None
    tuned_cost: Cost | None
    cost: Cost

    def to_dict(self) -> dict[str, object]:
        return {"teacher": self.label, "spec": self.spec, "scores": self.scores,
                "tuned_heuristic": None if self.tuned_path is None else str(self.tuned_path), "cost": self.cost}


def choose_teacher(plan: EpisodePlan, path: Path, seeds: int, selection: Selection, run_phase: PhaseRunner,
                   objective: StudyObjective, *, command: str = "") -> TeacherChoice:
    """Score the heuristic and best-rule on the selection seeds (in `path`/candidates), tune the heuristic (in
    `path`/tuning) within best-rule's search cost where the episodes are long enough, and choose the best of
    heuristic, heuristic:tuned and best-rule by `objective` (the tuned heuristic's score is its best trial's, against
    the same static episodes: the seeds are paired)."""
    spec = objective_spec(objective)
    rule = selection.chosen[BEST_RULE]
    scored = run_phase(Phase("teacher choice: candidates", path / "candidates", plan, [STATIC, "heuristic", rule],
                             [STATIC, "heuristic", BEST_RULE], seeds))
    scores = {label: score for label, score in spec.score(scored).items() if label != STATIC}
    specs = {"heuristic": "heuristic", BEST_RULE: rule}
    cost = episodes_cost(e for e in scored.episodes if e.controller != STATIC)
    tuned = None
    if SearchSpace.tunable(plan):
        budget = search_cost(selection, BEST_RULE)["env_epochs"]
        tuned = tune_heuristic(plan, path / "tuning", seeds, budget, run_phase, objective=spec, command=command)
        scores[TUNED_HEURISTIC] = tuned.best.score
        specs[TUNED_HEURISTIC] = f"heuristic:{tuned.path.resolve()}"
        cost = add_costs(cost, tuned.cost)
    label = max(scores, key=lambda k: scores[k])  # the first of equal scores: the plainer rule
    return TeacherChoice(label, specs[label], scores, None if tuned is None else tuned.path,
                         None if tuned is None else tuned.cost, cost)


def with_tuned(plan: EpisodePlan, choice: TeacherChoice | None) -> EpisodePlan:
    """`plan` whose `heuristic:tuned` runs the study's tuned heuristic (where it has one)."""
    if choice is None or choice.tuned_path is None:
        return plan
    return dataclasses.replace(plan, tuned_heuristic=choice.tuned_path)
