"""`heuristic:tuned`: the heuristic's thresholds tuned on selection seeds, so that a learned controller is measured
against the rule at its best, not at thresholds set by hand.

Bayesian optimization with optuna's TPE sampler, seeded with the plan's seed: the same call gives the same record.
Trial 0 is the default heuristic (clamped into the space, `tuning_space`), so the tuned one scores at least as well
on the selection seeds. Each trial writes its thresholds as a candidate record and runs `heuristic:CANDIDATE` on
paired episodes of the selection seeds as a phase of its own, in trials/<digest>/: with a phase runner that
continues finished phases (the command line's, a study's), a rerun search reuses its finished trials and a trial that
repeats earlier thresholds their episodes (which the cost counts once). The static host runs once on the
same seeds (static/), every trial's paired baseline. The objective scores a trial from its comparison with static;
ties go to the earlier trial. The best trial's thresholds are saved with how they were found (`HeuristicRecord`),
and `heuristic:RECORD` reruns them without searching.

The budget is in env-epochs, counted as selection counts them (each controller episode's epochs; the twin the gap
reward trains beside a trial is not counted, nor is it for a selection round): static costs seeds × max_epochs once
and so does each trial, so a budget B pays for B // (seeds × max_epochs) − 1 trials.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

import esper
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import Cost, add_costs, episodes_cost
from esper.evaluation.tuning_space import SearchSpace
from esper.leyline.errors import UserInputError
from esper.storage.provenance import esper_commit
from esper.storage.rundir import write_json_atomic, write_text_atomic
from esper.tamiyo import HeuristicRecord, ObjectiveRecord, TunedSetting, TuningSummary

__all__ = ["RECORD_FILE", "VAL_GAP", "Objective", "ObjectiveSpec", "TrialScore", "TunedHeuristic", "trial_count",
           "trials_markdown", "tune_heuristic", "val_gap_to_static"]

RECORD_FILE, TRIALS_FILE, STATIC = "tuned-heuristic.json", "trials.md", "static"
MAX_STARTUP_TRIALS = 10  # optuna's default number of random trials before TPE models the scores

Objective = Callable[[ComparisonResult], Mapping[str, float]]
"""Each controller's score (higher is better) in a comparison of it with static on the selection seeds."""


def val_gap_to_static(result: ComparisonResult) -> dict[str, float]:
    """Each controller's mean final validation accuracy minus the static host's on the same seeds (pp)."""
    static = result.per_controller[STATIC]["final_accuracy"]["mean"]
    return {c: s["final_accuracy"]["mean"] - static for c, s in result.per_controller.items()}


@dataclass(frozen=True)
class ObjectiveSpec:
    """An objective and how a record names it: its name, and the charge and cost it applies, if any."""

    name: str
    score: Objective
    charge: str | None = None
    cost: float | None = None

    def record(self) -> ObjectiveRecord:
        return ObjectiveRecord(name=self.name, charge=self.charge, cost=self.cost)


VAL_GAP = ObjectiveSpec("val_gap_to_static", val_gap_to_static)


@dataclass(frozen=True)
class TrialScore:
    """One trial: its number, the parameters drawn, every threshold, its score and its comparison with static."""

    number: int
    params: dict[str, Any]
    thresholds: dict[str, Any]
    score: float
    result: ComparisonResult


@dataclass(frozen=True)
class TunedHeuristic:
    """A finished search: the record (saved at `path`), what the search cost to obtain, and every trial."""

    record: HeuristicRecord
    path: Path
    cost: Cost
    trials: list[TrialScore]

    @property
    def best(self) -> TrialScore:
        assert self.record.tuning is not None
        return self.trials[self.record.tuning.best_trial]


TrialCallback = Callable[[TrialScore, TrialScore, int], None]
"""Called after each trial with it, the best trial so far and the number of trials."""


def trial_count(budget_env_epochs: int, seeds: int, max_epochs: int) -> int:
    """The trials a budget pays for once the static baseline is paid; a budget that pays for none is refused."""
    per_phase = seeds * max_epochs
    trials = budget_env_epochs // per_phase - 1
    if trials < 1:
        raise UserInputError(f"A budget of {budget_env_epochs} env-epochs pays for no trial: the static baseline and "
                             f"each trial cost {seeds} seeds × {max_epochs} epochs = {per_phase}; pass --budget "
                             f"{2 * per_phase} or more")
    return trials


@dataclass(frozen=True)
class _Search:
    """What every trial of one search shares."""

    plan: EpisodePlan
    path: Path
    seeds: int
    run_phase: PhaseRunner
    objective: ObjectiveSpec
    static: ComparisonResult

    def run(self, number: int, params: dict[str, Any], thresholds: dict[str, Any]) -> TrialScore:
        """Trial `number`: its candidate record, its phase (reused when earlier thresholds were the same), its score."""
        digest = hashlib.sha256(json.dumps(thresholds, sort_keys=True).encode()).hexdigest()[:8]
        candidate = self.path / "candidates" / f"{digest}.json"
        setting = TunedSetting.model_validate(self.plan.episode.controller_setting())
        write_json_atomic(candidate, HeuristicRecord(thresholds=thresholds, setting=setting).to_dict())
        label = f"heuristic:{digest}"
        phase = Phase(f"tuning trial {number}", self.path / "trials" / digest, self.plan, [f"heuristic:{candidate}"],
                      [label], self.seeds)
        episodes = [e for e in self.run_phase(phase).episodes if e.controller == label]
        result = ComparisonResult.from_episodes([STATIC, label], [*self.static.episodes, *episodes],
                                                tie_threshold=self.static.tie_threshold, seed=self.plan.seed)
        score = float(self.objective.score(result)[label])
        if not math.isfinite(score):
            raise ValueError(f"Objective {self.objective.name} scored trial {number} {score}: it must be finite")
        return TrialScore(number, params, thresholds, score, result)


def _sampler(seed: int, trials: int) -> optuna.samplers.TPESampler:
    """TPE seeded with `seed`; its random start is a third of the trials (at most optuna's default of 10), so a small
    budget still leaves trials guided by the scores."""
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(1, min(MAX_STARTUP_TRIALS, trials // 3)))


def tune_heuristic(plan: EpisodePlan, path: Path, seeds: int, budget_env_epochs: int, run_phase: PhaseRunner, *,
                   objective: ObjectiveSpec = VAL_GAP, record_path: Path | None = None, command: str = "",
                   on_trial: TrialCallback | None = None) -> TunedHeuristic:
    """Tune the heuristic on the first `seeds` paired episodes of `plan` (a study's selection plan) within
    `budget_env_epochs`, each phase run by `run_phase` in `path`; the record is saved (atomically) at `record_path`
    (default `path`/tuned-heuristic.json) naming `command`, and the trials' table in `path`/trials.md."""
    space = SearchSpace.of(plan)
    trials = trial_count(budget_env_epochs, seeds, plan.episode.max_epochs)
    static = run_phase(Phase("tuning: static baseline", path / STATIC, plan, [STATIC], [STATIC], seeds))
    search = _Search(plan, path, seeds, run_phase, objective, static)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=_sampler(plan.seed, trials))
    study.enqueue_trial(space.default_params())
    scores: list[TrialScore] = []
    for _ in range(trials):
        trial = study.ask()
        params = space.suggest(trial)
        scores.append(search.run(trial.number, params, space.thresholds(params)))
        study.tell(trial, scores[-1].score)
        if on_trial is not None:
            on_trial(scores[-1], max(scores, key=lambda s: s.score), trials)
    best = max(scores, key=lambda s: s.score)  # the first of equal scores: the default heuristic wins its ties
    distinct = {json.dumps(s.thresholds, sort_keys=True): s for s in scores}.values()
    cost = add_costs(episodes_cost(static.episodes),
                     *(episodes_cost(e for e in s.result.episodes if e.controller != STATIC) for s in distinct))
    summary = TuningSummary(
        objective=objective.record(), budget_env_epochs=budget_env_epochs, trials=trials, best_trial=best.number,
        best_score=best.score, default_score=scores[0].score, seeds=seeds, seed=plan.seed,
        seed_stream=plan.stream.value, sampler=f"optuna {optuna.__version__} TPESampler(seed={plan.seed})",
        cost_env_epochs=cost["env_epochs"], cost_gflops=cost["gflops"], command=command,
        esper_commit=esper_commit(), esper_version=esper.__version__)
    setting = TunedSetting.model_validate(plan.episode.controller_setting())
    record = HeuristicRecord(thresholds=best.thresholds, setting=setting, tuning=summary)
    target = record_path if record_path is not None else path / RECORD_FILE
    write_json_atomic(target, record.to_dict())
    write_text_atomic(path / TRIALS_FILE, trials_markdown(scores, best, objective))
    return TunedHeuristic(record, target, cost, scores)


def trials_markdown(scores: Sequence[TrialScore], best: TrialScore, objective: ObjectiveSpec) -> str:
    """Every trial's score and the parameters it drew, best first (trial 0: the default heuristic)."""
    names = list(scores[0].params)
    lines = [f"# Tuning the heuristic: {len(scores)} trials, objective {objective.name}", "",
             f"Best: trial {best.number}, score {best.score:+.3f} (trial 0, the default heuristic: "
             f"{scores[0].score:+.3f}).", "",
             "| trial | score | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for s in sorted(scores, key=lambda s: (-s.score, s.number)):
        lines.append(f"| {s.number} | {s.score:+.3f} | " + " | ".join(str(s.params[n]) for n in names) + " |")
    return "\n".join(lines) + "\n"
