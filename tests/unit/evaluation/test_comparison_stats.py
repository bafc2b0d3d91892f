"""Comparison statistics: seeded bootstrap intervals, paired verdicts, and results.json read back into typed data."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper.env.logs import EpisodeResult
from esper.evaluation.comparison import ComparisonResult
from esper.evaluation.stats import bootstrap_mean_ci, compare_pair, mean_ci, mean_std
from esper.leyline.seeding import derive_seed
from esper.runtime.rows import LogFormatError

ACCURACIES = st.lists(st.floats(min_value=0.0, max_value=100.0, allow_nan=False), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(values=ACCURACIES, seed=st.integers(0, 2**32))
def test_bootstrap_interval_lies_within_the_sample_and_is_reproducible(values: list[float], seed: int) -> None:
    low, high = bootstrap_mean_ci(values, seed=seed, resamples=200)
    assert min(values) - 1e-9 <= low <= high <= max(values) + 1e-9
    assert bootstrap_mean_ci(values, seed=seed, resamples=200) == (low, high)


def test_bootstrap_of_a_constant_is_a_point_and_empty_is_an_error() -> None:
    assert bootstrap_mean_ci([70.0] * 5, seed=1) == (70.0, 70.0)
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_mean_ci([], seed=1)


def test_mean_ci_extends_mean_std_and_narrows_with_more_episodes() -> None:
    few = [70.0, 74.0, 72.0, 76.0]
    stats = mean_ci(few, seed=3)
    assert {"mean": stats["mean"], "std": stats["std"]} == mean_std(few)
    assert stats["ci95"][0] < stats["mean"] < stats["ci95"][1]
    many = mean_ci(few * 25, seed=3)
    assert many["ci95"][1] - many["ci95"][0] < stats["ci95"][1] - stats["ci95"][0]


@settings(max_examples=40, deadline=None)
@given(pairs=st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), min_size=1, max_size=10),
       tie=st.floats(0.0, 5.0))
def test_pair_verdict_agrees_with_its_interval(pairs: list[tuple[float, float]], tie: float) -> None:
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    result = compare_pair(a, b, tie_threshold=tie, seed=7)
    assert result["wins"] + result["losses"] + result["ties"] == len(pairs)
    low, high = result["ci95"]
    if result["verdict"] == "better":
        assert low > 0 and result["mean_delta"] > tie
    elif result["verdict"] == "worse":
        assert high < 0 and result["mean_delta"] < -tie
    else:
        assert not (low > 0 and result["mean_delta"] > tie) and not (high < 0 and result["mean_delta"] < -tie)


def _episode(controller: str, episode: int, final: float) -> EpisodeResult:
    return EpisodeResult(controller=controller, env_id=0, episode=episode, batch=episode, env_seed=episode,
                         host_width=1.0, host_params=1000, final_accuracy=final, final_loss=1.0,
                         twin_final_accuracy=None, twin_final_loss=None, best_accuracy=final, seeds_created=1,
                         seeds_fossilized=0,
                         seeds_culled=1, params_added=100, action_counts={"WAIT": 2, "GERMINATE": 1, "FOSSILIZE": 0,
                                                                           "CULL": 1},
                         accuracy_curve=[final - 1, final], total_reward=1.0, rollbacks=0)


def _result() -> ComparisonResult:
    episodes = [_episode(c, i, 60 + 3 * i + 2 * j) for i in range(4) for j, c in enumerate(("static", "ppo"))]
    return ComparisonResult.from_episodes(["static", "ppo"], episodes, tie_threshold=0.5, seed=11)


def test_per_controller_final_accuracy_has_a_seeded_bootstrap_interval() -> None:
    result = _result()
    fa = result.per_controller["static"]["final_accuracy"]
    assert fa == mean_ci([60.0, 63.0, 66.0, 69.0], seed=derive_seed(result.seed, "final_accuracy", 0))
    assert _result().per_controller == result.per_controller  # reproducible from the comparison seed


def test_results_json_reads_back_into_the_same_typed_result() -> None:
    result = _result()
    assert ComparisonResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


@pytest.mark.parametrize("damage", ["top", "controller", "ci", "pair", "episode", "reference"])
def test_a_different_results_schema_is_named(damage: str) -> None:
    data = json.loads(json.dumps(_result().to_dict()))
    if damage == "top":
        del data["pairwise"]
    elif damage == "controller":
        del data["per_controller"]["ppo"]["action_mix"]
    elif damage == "ci":
        data["per_controller"]["ppo"]["final_accuracy"] = {"mean": 1.0, "std": 0.0}
    elif damage == "pair":
        data["pairwise"]["ppo"]["static"]["extra"] = 1
    elif damage == "episode":
        del data["episodes"][0]["rollbacks"]
    else:
        data["reference"] = "ppo"
    with pytest.raises(LogFormatError, match=r"results\.json"):
        ComparisonResult.from_dict(data)
