"""The greedy search behind best-fixed and best-rule: which candidates the next selection round tries."""

from __future__ import annotations

from esper.data.tasks import get_task_spec
from esper.env import EpisodeResult
from esper.evaluation.results import ComparisonResult
from esper.evaluation.selection import (
    BEST_FIXED,
    BEST_RULE,
    Selection,
    choose_best,
    greedy_extensions,
    rule_candidates,
    search_cost,
    selection_candidates,
)
from esper.leyline import LifecycleOp

CNN = get_task_spec("synthetic").action_space

SLOTS = ("early", "mid", "late")


def _extend(means: dict[str, float], family: list[str], latest: list[str], max_modules: int = 3) -> list[str]:
    return greedy_extensions(means, family, latest, CNN, SLOTS, max_modules)


def test_the_best_spec_of_the_latest_round_is_extended_by_one_module_in_each_free_slot() -> None:
    fixed, _ = selection_candidates(CNN, SLOTS)
    means = {c: 30.0 for c in fixed} | {"fixed:norm@early": 40.0}
    grown = _extend(means, fixed, fixed)
    assert len(grown) == 4 * 2 and all(c.startswith("fixed:norm@early,") for c in grown)
    # round 2: a better pair is extended again, to three modules
    means |= {c: 35.0 for c in grown} | {"fixed:norm@early,depthwise@late": 45.0}
    third = _extend(means, [*fixed, *grown], grown)
    assert third == [f"fixed:norm@early,{b}@mid,depthwise@late" for b in ("conv_light", "attention", "norm",
                                                                            "depthwise")]
    assert _extend(means, [*fixed, *grown], grown, max_modules=2) == []  # the seed budget caps the modules


def test_the_search_stops_when_a_round_finds_nothing_better() -> None:
    fixed, _ = selection_candidates(CNN, SLOTS)
    means = {c: 30.0 for c in fixed} | {"fixed:norm@early": 40.0}
    grown = _extend(means, fixed, fixed)
    means |= {c: 39.0 for c in grown}
    assert _extend(means, [*fixed, *grown], grown) == []
    assert choose_best(means, [*fixed, *grown]) == "fixed:norm@early"


def test_a_behaviour_preset_is_never_extended_and_ties_keep_the_first() -> None:
    rules = rule_candidates(CNN, SLOTS)
    means = {c: 30.0 for c in rules} | {"behavior:baseline": 50.0}
    assert _extend(means, rules, rules) == []
    means = {c: 30.0 for c in rules}
    assert choose_best(means, rules) == rules[0]
    assert _extend(means, rules, rules) == []  # the first rule is a behaviour preset


def _episode(label: str, epochs: int) -> EpisodeResult:
    return EpisodeResult(controller=label, env_id=0, episode=0, batch=0, env_seed=0, host_width=1.0, host_params=10,
                         final_accuracy=50.0, final_loss=1.0, twin_final_accuracy=None, twin_final_loss=None,
                         best_accuracy=50.0, seeds_created=0, seeds_fossilized=0, seeds_culled=0, params_added=0,
                         action_counts={op.name: 0 for op in LifecycleOp}, accuracy_curve=[50.0] * epochs,
                         total_reward=0.0, rollbacks=0, train_flops=epochs * 10**9)


def test_each_family_is_charged_the_episodes_of_its_own_candidates() -> None:
    """best-rule's search cost is the budget a tuned heuristic gets: the rules' episodes, not best-fixed's."""
    rounds = [ComparisonResult.from_episodes(labels, [_episode(c, epochs) for c in labels], tie_threshold=0.1, seed=0)
              for labels, epochs in ((["fixed:norm@early", "behavior:baseline", "grow:norm@early"], 10),
                                     (["fixed:norm@early,norm@mid", "grow:norm@early,norm@mid"], 20))]
    selection = Selection(rounds, {})
    assert search_cost(selection, BEST_RULE) == {"env_epochs": 10 + 10 + 20, "gflops": 40.0}
    assert search_cost(selection, BEST_FIXED) == {"env_epochs": 10 + 20, "gflops": 30.0}
