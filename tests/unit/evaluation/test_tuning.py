"""Tuning the heuristic: the search space follows the setting, the search is reproducible, stays within its budget
and keeps the trial its objective scores best; its record reruns the best trial's episodes bit for bit.

Most tests run the search against a stand-in phase runner that scores each candidate by a planted function of its
thresholds (milliseconds per trial); one runs real paired episodes at a tiny size (seconds)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper.data.tasks import DataCache, DataOptions
from esper.env import EpisodeResult
from esper.env.setting import EpisodeSetting
from esper.evaluation.comparison import parse_controllers, run_comparison
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.results import ComparisonResult
from esper.evaluation.tuning import ObjectiveSpec, trial_count, tune_heuristic, val_gap_to_static
from esper.evaluation.tuning_space import FIRST_BLUEPRINT, SearchSpace
from esper.leyline import LifecycleOp
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import SeedStream
from esper.tamiyo import HeuristicPolicyConfig, read_heuristic_record

CPU = torch.device("cpu")


def _plan(max_epochs: int = 25, seed: int = 42, slots: tuple[str, ...] = ("early", "mid", "late"),
          max_train_samples: int = 64, batch_size: int = 64) -> EpisodePlan:
    episode = EpisodeSetting(task="synthetic", slots=tuple(slots), max_epochs=max_epochs, batch_size=batch_size,
                             max_train_samples=max_train_samples, max_val_samples=32)
    return EpisodePlan(episode=episode, seed=seed, devices=[CPU], max_test_samples=64, param_cost=1.0,
                       stream=SeedStream.SELECTION)


def _episode(label: str, episode: int, accuracy: float, epochs: int) -> EpisodeResult:
    return EpisodeResult(controller=label, env_id=0, episode=episode, batch=0, env_seed=episode, host_width=1.0,
                         host_params=1000, final_accuracy=accuracy, final_loss=1.0, twin_final_accuracy=None,
                         twin_final_loss=None, best_accuracy=accuracy, seeds_created=0, seeds_fossilized=0,
                         seeds_culled=0, params_added=0,
                         action_counts={op.name: (epochs - 1 if op == LifecycleOp.WAIT else 0) for op in LifecycleOp},
                         accuracy_curve=[accuracy] * epochs, total_reward=0.0, rollbacks=0, train_flops=10**9)


def _planted(thresholds: dict[str, Any]) -> float:
    """A validation accuracy with its best at stall 6, embargo 2 and a 1.5 pp drop, to give TPE something to find."""
    return (60.0 - abs(thresholds["stall_training_epochs"] - 6) - abs(thresholds["embargo_epochs_after_cull"] - 2)
            - abs(thresholds["cull_if_accuracy_drops_by"] - 1.5))


def _stand_in(phases: list[Phase]) -> PhaseRunner:
    """Runs no episode: static scores 50 %, a candidate its planted accuracy, on every seed of the phase."""

    def run(phase: Phase) -> ComparisonResult:
        phases.append(phase)
        episodes = []
        for spec, label in zip(phase.specs, phase.labels, strict=True):
            name, _, path = spec.partition(":")
            accuracy = 50.0 if name == "static" else _planted(read_heuristic_record(Path(path)).thresholds)
            episodes += [_episode(label, i, accuracy, phase.plan.episode.max_epochs) for i in range(phase.seeds)]
        return ComparisonResult.from_episodes(phase.labels, episodes, tie_threshold=0.1, seed=phase.plan.seed)
    return run


def _record(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text())
    return record


# -- the search space ---------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(st.integers(11, 200), st.sampled_from([("early",), ("early", "late"), ("early", "mid", "late")]))
def test_every_range_lies_within_the_episode_and_holds_the_default(max_epochs: int, slots: tuple[str, ...]) -> None:
    space = SearchSpace.of(_plan(max_epochs, slots=slots))
    latest = max_epochs - 10  # synthetic seeds train 3 and blend 5 epochs
    assert space.integers["min_epochs_before_germinate"] == (1, latest)
    assert all(0 <= low <= high <= max_epochs - 1 for low, high in space.integers.values())
    assert ("max_concurrent_seeds" in space.integers) == (len(slots) > 1)
    defaults = space.default_params()
    assert all(low <= defaults[name] <= high for name, (low, high) in space.integers.items())
    # where the defaults lie inside the space, trial 0's thresholds are the default heuristic's
    if max_epochs >= 13:
        assert space.thresholds(defaults) == {k: v for k, v in HeuristicPolicyConfig().to_dict().items()
                                              if k in space.defaults}


def test_the_rotation_starts_at_the_chosen_blueprint_and_keeps_its_order() -> None:
    space = SearchSpace.of(_plan())
    thresholds = space.thresholds({**space.default_params(), FIRST_BLUEPRINT: "norm"})
    assert thresholds["blueprint_rotation"]["cnn"] == ["norm", "depthwise", "conv_light", "conv_heavy", "attention"]
    assert thresholds["blueprint_rotation"]["transformer"] == ["norm", "mlp", "attention", "lora"]
    assert space.thresholds({**space.default_params(), "max_concurrent_seeds": 2})["max_concurrent_seeds"] == 2


def test_episodes_too_short_for_any_seed_to_be_fossilized_are_refused_naming_the_length() -> None:
    with pytest.raises(UserInputError, match=r"Episodes of 10 epochs are too short .* pass --max-epochs 11 or more"):
        SearchSpace.of(_plan(10))


# -- the search ---------------------------------------------------------------------------------------------------


def test_the_budget_pays_for_static_once_then_for_whole_trials() -> None:
    assert trial_count(10 * 25 * 2, 10, 25) == 1
    assert trial_count(5 * 25 * 13 - 1, 5, 25) == 11
    with pytest.raises(UserInputError, match=r"pays for no trial: .* = 125; pass --budget 250 or more"):
        trial_count(249, 5, 25)


def test_the_search_is_reproducible_stays_within_budget_and_its_seed_matters(tmp_path: Path) -> None:
    plan, seeds, budget = _plan(), 2, 2 * 25 * 14 + 49  # static and 13 trials, and less than another
    phases: list[Phase] = []
    first = tune_heuristic(plan, tmp_path / "a", seeds, budget, _stand_in(phases), command="esper tune")
    again = tune_heuristic(plan, tmp_path / "b", seeds, budget, _stand_in([]), command="esper tune")
    assert _record(tmp_path / "a" / "tuned-heuristic.json") == _record(tmp_path / "b" / "tuned-heuristic.json")
    assert first.record == again.record
    assert [t.params for t in first.trials] == [t.params for t in again.trials]
    # the budget: static once, then 13 trials, each on `seeds` paired episodes of max_epochs epochs
    assert len(phases) == 14 and len(first.trials) == 13
    assert phases[0].specs == ["static"] and all(p.seeds == seeds and p.plan == plan for p in phases)
    assert first.cost["env_epochs"] <= budget
    assert first.cost["env_epochs"] == seeds * 25 * (1 + len({json.dumps(t.thresholds) for t in first.trials}))
    tuning = first.record.tuning
    assert tuning is not None and (tuning.trials, tuning.budget_env_epochs, tuning.seeds) == (13, budget, seeds)
    assert tuning.cost_env_epochs == first.cost["env_epochs"] and tuning.command == "esper tune"
    # trial 0 is the default heuristic; TPE then improves on it against the planted accuracy
    assert first.trials[0].thresholds == {k: v for k, v in HeuristicPolicyConfig().to_dict().items()
                                          if k in first.record.thresholds}
    assert first.best.score > first.trials[0].score == tuning.default_score
    other = tune_heuristic(_plan(seed=7), tmp_path / "c", seeds, budget, _stand_in([]))
    assert [t.params for t in other.trials[1:]] != [t.params for t in first.trials[1:]]


def test_the_best_trial_is_the_one_the_objective_scores_best_the_earlier_on_a_tie(tmp_path: Path) -> None:
    planted = iter([0.0, 3.0, -1.0, 3.0, 2.0])  # trials 1 and 3 tie for the best: the earlier one is kept
    calls = itertools.count()

    def objective(result: ComparisonResult) -> dict[str, float]:
        next(calls)
        return {c: next(planted) if c != "static" else 0.0 for c in result.controllers}

    spec = ObjectiveSpec("planted", objective, charge="compute", cost=1.25)
    tuned = tune_heuristic(_plan(), tmp_path, 1, 25 * 6, _stand_in([]), objective=spec)
    assert next(calls) == 5  # one call per trial
    tuning = tuned.record.tuning
    assert tuning is not None and (tuning.best_trial, tuning.best_score, tuning.default_score) == (1, 3.0, 0.0)
    assert tuned.record.thresholds == tuned.trials[1].thresholds != tuned.trials[3].thresholds
    assert tuning.objective.model_dump() == {"name": "planted", "charge": "compute", "cost": 1.25}
    table = (tmp_path / "trials.md").read_text()
    assert "Best: trial 1, score +3.000" in table and table.count("\n| ") == 6  # header and 5 trials


def test_the_default_objective_is_the_validation_gap_to_static() -> None:
    episodes = [_episode("static", 0, 50.0, 3), _episode("static", 1, 52.0, 3), _episode("h", 0, 53.0, 3),
                _episode("h", 1, 52.0, 3)]
    result = ComparisonResult.from_episodes(["static", "h"], episodes, tie_threshold=0.1, seed=0)
    assert val_gap_to_static(result) == {"static": 0.0, "h": 1.5}


def test_a_non_finite_score_stops_the_search(tmp_path: Path) -> None:
    spec = ObjectiveSpec("broken", lambda result: {c: float("nan") for c in result.controllers})
    with pytest.raises(ValueError, match="Objective broken scored trial 0 nan"):
        tune_heuristic(_plan(), tmp_path, 1, 25 * 3, _stand_in([]), objective=spec)


# -- the record, rerun -------------------------------------------------------------------------------------------


def _episode_phase(cache: DataCache) -> Callable[[Phase], ComparisonResult]:
    return lambda phase: run_comparison(parse_controllers(phase.specs), phase.plan, phase.seeds, cache,
                                        labels=phase.labels)


def test_a_record_reruns_the_best_trials_episodes_bit_for_bit(tmp_path: Path) -> None:
    """A tiny real search (two trials on one selection seed, the objective planted on growth, then on the later
    trial); the heuristic run again from its record, with no search, gives the best trial's episodes exactly."""
    plan = dataclasses.replace(_plan(max_epochs=14, max_train_samples=256, batch_size=32),
                               reward_family="sparse")  # no static twin beside each trial: half the time
    cache = DataCache(DataOptions())
    order = itertools.count()
    growth = ObjectiveSpec("growth", lambda result: {c: s["seeds_created"] + next(order) / 100
                                                     for c, s in result.per_controller.items() if c != "static"})
    tuned = tune_heuristic(plan, tmp_path, 1, 14 * 3, _episode_phase(cache), objective=growth)
    assert tuned.record.tuning is not None and tuned.record.tuning.best_trial == 1
    best, default = ([e for e in trial.result.episodes if e.controller != "static"]
                     for trial in (tuned.best, tuned.trials[0]))
    assert best[0].seeds_created > 0  # the trial grew the network: the rerun has decisions to reproduce,
    assert _outcome(best[0]) != _outcome(default[0])  # and they are not the default heuristic's
    label = best[0].controller
    study_plan = dataclasses.replace(plan, tuned_heuristic=tuned.path)  # a study names its record: heuristic:tuned
    rerun = run_comparison(parse_controllers(["heuristic:tuned"]), study_plan, 1, cache, labels=[label])
    assert [_without_time(e) for e in rerun.episodes] == [_without_time(e) for e in best]


def _without_time(episode: EpisodeResult) -> dict[str, Any]:
    return {k: v for k, v in episode.to_dict().items() if k != "wall_seconds"}


def _outcome(episode: EpisodeResult) -> dict[str, Any]:
    return {k: v for k, v in _without_time(episode).items() if k != "controller"}
