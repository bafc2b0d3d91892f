"""Comparison statistics: t-intervals, paired verdicts that mirror exactly, ties below one sample, and results.json
(test accuracy primary, validation beside it) read back into typed data, including files from before test scores."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from esper.env.logs import EpisodeResult
from esper.evaluation.comparison import ComparisonResult
from esper.evaluation.stats import compare_pair, mean_ci, mean_std, one_sample_pp, t_interval
from esper.storage.rows import LogFormatError

ACCURACIES = st.lists(st.floats(min_value=0.0, max_value=100.0, allow_nan=False), min_size=1, max_size=12)
PAIRS = st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), min_size=1, max_size=12)
MIRRORED = {"better": "worse", "worse": "better", "no significant difference": "no significant difference"}


def test_t_interval_is_the_student_t_interval_of_the_mean() -> None:
    values = [70.0, 74.0, 72.0, 76.0, 71.5]
    expected = scipy_stats.t.interval(0.95, len(values) - 1, loc=sum(values) / len(values),
                                      scale=scipy_stats.sem(values))
    assert t_interval(values) == pytest.approx(expected, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(values=ACCURACIES)
def test_t_interval_is_finite_and_centred_on_the_mean(values: list[float]) -> None:
    low, high = t_interval(values)
    mean = mean_std(values)["mean"]
    assert math.isfinite(low) and math.isfinite(high) and low <= mean <= high
    assert high - mean == pytest.approx(mean - low, abs=1e-9)


def test_a_constant_or_a_single_value_is_a_point_and_empty_is_an_error() -> None:
    assert t_interval([70.0] * 5) == (70.0, 70.0)
    assert t_interval([63.5]) == (63.5, 63.5)
    with pytest.raises(ValueError, match="at least one"):
        t_interval([])


def test_mean_ci_extends_mean_std_and_narrows_with_more_episodes() -> None:
    few = [70.0, 74.0, 72.0, 76.0]
    stats = mean_ci(few)
    assert {"mean": stats["mean"], "std": stats["std"]} == mean_std(few)
    assert stats["ci95"][0] < stats["mean"] < stats["ci95"][1]
    many = mean_ci(few * 25)
    assert many["ci95"][1] - many["ci95"][0] < stats["ci95"][1] - stats["ci95"][0]


@settings(max_examples=60, deadline=None)
@given(pairs=PAIRS, tie=st.floats(0.0, 5.0))
def test_pair_verdict_agrees_with_its_interval(pairs: list[tuple[float, float]], tie: float) -> None:
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    result = compare_pair(a, b, tie_threshold=tie)
    assert result["wins"] + result["losses"] + result["ties"] == len(pairs)
    low, high = result["ci95"]
    assert math.isfinite(low) and low <= result["mean_delta"] <= high
    if result["verdict"] == "better":
        assert low > 0 and result["mean_delta"] >= tie - 1e-9 and len(pairs) > 1
    elif result["verdict"] == "worse":
        assert high < 0 and result["mean_delta"] <= -tie + 1e-9 and len(pairs) > 1
    else:
        assert len(pairs) == 1 or abs(result["mean_delta"]) < tie or low <= 0 <= high


@settings(max_examples=100, deadline=None)
@given(pairs=PAIRS, tie=st.sampled_from([0.0, 0.5, one_sample_pp(96), one_sample_pp(256)]))
def test_swapping_the_pair_mirrors_every_statistic_exactly(pairs: list[tuple[float, float]], tie: float) -> None:
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    ab, ba = compare_pair(a, b, tie_threshold=tie), compare_pair(b, a, tie_threshold=tie)
    assert ba["mean_delta"] == -ab["mean_delta"]
    assert ba["ci95"] == [-ab["ci95"][1], -ab["ci95"][0]]
    assert (ba["wins"], ba["losses"], ba["ties"]) == (ab["losses"], ab["wins"], ab["ties"])
    assert ba["verdict"] == MIRRORED[ab["verdict"]]


def test_identical_differences_give_a_point_interval_and_one_episode_no_verdict() -> None:
    same = compare_pair([72.0, 75.0, 70.0], [70.0, 73.0, 68.0], tie_threshold=0.5)
    assert same["ci95"] == [same["mean_delta"]] * 2 and same["verdict"] == "better" and same["wins"] == 3
    one = compare_pair([80.0], [70.0], tie_threshold=0.5)
    assert one["ci95"] == [10.0, 10.0] and one["verdict"] == "no significant difference" and one["wins"] == 1


def test_one_sample_pp_is_a_percentage_point_per_sample() -> None:
    assert one_sample_pp(200) == 0.5 and one_sample_pp(1) == 100.0
    with pytest.raises(ValueError, match="at least one sample"):
        one_sample_pp(0)


@pytest.mark.parametrize("n", [96, 256, 1000, 10_000])
def test_one_sample_of_difference_is_never_a_tie_despite_float_rounding(n: int) -> None:
    # 100·(k+1)/n − 100·k/n falls a few ulps short of 100/n for about half of the k of most n
    better = [100 * (k + 1) / n for k in range(n)]
    worse = [100 * k / n for k in range(n)]
    assert compare_pair(better, worse, tie_threshold=one_sample_pp(n))["wins"] == n
    assert compare_pair(worse, better, tie_threshold=one_sample_pp(n))["losses"] == n
    assert compare_pair(worse, worse, tie_threshold=one_sample_pp(n))["ties"] == n


def test_equal_accuracies_are_ties_even_at_a_zero_threshold() -> None:
    assert compare_pair([70.0, 71.0], [70.0, 70.0], tie_threshold=0.0) | {"ci95": None} == {
        "wins": 1, "losses": 0, "ties": 1, "mean_delta": 0.5, "ci95": None, "verdict": "no significant difference"}
    with pytest.raises(ValueError, match="tie_threshold"):
        compare_pair([1.0], [1.0], tie_threshold=-1.0)


def _episode(controller: str, episode: int, final: float, test: float | None = None) -> EpisodeResult:
    return EpisodeResult(controller=controller, env_id=0, episode=episode, batch=episode, env_seed=episode,
                         host_width=1.0, host_params=1000, final_accuracy=final, final_loss=1.0,
                         twin_final_accuracy=None, twin_final_loss=None, best_accuracy=final, seeds_created=1,
                         seeds_fossilized=0, seeds_culled=1, params_added=100,
                         action_counts={"WAIT": 2, "GERMINATE": 1, "FOSSILIZE": 0, "CULL": 1},
                         accuracy_curve=[final - 1, final], total_reward=1.0, rollbacks=0,
                         final_test_accuracy=test, final_test_loss=None if test is None else 1.5 - test / 100,
                         train_flops=10**9 * (episode + 1), wall_seconds=2.0 + episode)


CONTROLLERS = ("static", "ppo", "heuristic")


def _result(tested: tuple[str, ...] = ()) -> ComparisonResult:
    """Four paired episodes; test accuracy (on 96 images) only for the `tested` controllers."""
    episodes = [_episode(c, i, 60 + 3 * i + j, (58 + 2 * i + j + i * j % 3) * 100 / 96 if c in tested else None)
                for i in range(4) for j, c in enumerate(CONTROLLERS)]
    return ComparisonResult.from_episodes(list(CONTROLLERS), episodes, tie_threshold=one_sample_pp(96), seed=11)


def test_validation_accuracy_is_the_metric_without_test_scores() -> None:
    result = _result()
    static = result.per_controller["static"]
    assert static["final_accuracy"] == mean_ci([60.0, 63.0, 66.0, 69.0])
    assert static["final_test_accuracy"] is None and static["final_test_loss"] is None
    assert static["train_flops"] == mean_std([1e9, 2e9, 3e9, 4e9])
    assert static["wall_seconds"] == mean_std([2.0, 3.0, 4.0, 5.0])
    pair = result.pairwise["heuristic"]["static"]
    assert pair["metric"] == "val_accuracy"
    assert {k: v for k, v in pair.items() if k not in ("metric", "val")} == pair["val"]
    assert pair["mean_delta"] == 2.0 and pair["verdict"] == "better" and pair["wins"] == 4
    one_pp = result.pairwise["ppo"]["static"]  # 1 pp is below one image of 96 (1.04 pp): a tie
    assert one_pp["ties"] == 4 and one_pp["verdict"] == "no significant difference"


def test_test_accuracy_is_the_metric_where_both_controllers_were_tested() -> None:
    result = _result(tested=("static", "ppo"))
    tests = {c: [e.final_test_accuracy for e in result.episodes if e.controller == c] for c in CONTROLLERS}
    assert result.per_controller["ppo"]["final_test_accuracy"] == mean_ci(tests["ppo"])
    assert result.per_controller["heuristic"]["final_test_accuracy"] is None
    pair = result.pairwise["ppo"]["static"]
    assert pair["metric"] == "test_accuracy"
    expected = compare_pair(tests["ppo"], tests["static"], tie_threshold=one_sample_pp(96))
    assert {k: v for k, v in pair.items() if k not in ("metric", "val")} == expected
    assert pair["val"] == compare_pair([61.0, 64.0, 67.0, 70.0], [60.0, 63.0, 66.0, 69.0],
                                       tie_threshold=one_sample_pp(96))
    assert pair["val"]["ties"] == 4 and pair["ties"] < 4  # 1 pp on validation is below one test image (1.04 pp)
    assert result.pairwise["heuristic"]["static"]["metric"] == "val_accuracy"  # heuristic has no test scores


@pytest.mark.parametrize("tested", [(), ("static", "ppo"), CONTROLLERS])
def test_mirrored_cells_of_the_results_are_exact_negatives(tested: tuple[str, ...]) -> None:
    result = _result(tested)
    for a in CONTROLLERS:
        for b in CONTROLLERS:
            if a != b:
                ab, ba = result.pairwise[a][b], result.pairwise[b][a]
                assert ab["metric"] == ba["metric"]
                for x, y in ((ab, ba), (ab["val"], ba["val"])):
                    assert y["mean_delta"] == -x["mean_delta"] and y["ci95"] == [-x["ci95"][1], -x["ci95"][0]]
                    assert (y["wins"], y["losses"], y["ties"]) == (x["losses"], x["wins"], x["ties"])
                    assert y["verdict"] == MIRRORED[x["verdict"]]


@pytest.mark.parametrize("tested", [(), ("static", "ppo"), CONTROLLERS])
def test_results_json_reads_back_into_the_same_typed_result(tested: tuple[str, ...]) -> None:
    result = _result(tested)
    assert ComparisonResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_a_results_json_with_keys_written_beside_it_reads_back_into_the_result_and_those_keys() -> None:
    """A study writes its own results beside the comparison's; reading them back returns both, the comparison's keys
    (its progress flags included) never among the extra ones."""
    result = _result()
    extra = {"study": {"runs": 2, "teacher": "heuristic"}}
    data = json.loads(json.dumps({**result.to_dict(), **extra}))
    assert ComparisonResult.from_written(data) == (result, extra)
    assert ComparisonResult.from_written(result.to_dict()) == (result, {})
    with pytest.raises(LogFormatError):
        ComparisonResult.from_dict(data)


def test_an_unfinished_comparison_says_so_in_every_file() -> None:
    """Four of ten paired episodes, heuristic not run yet: results.json, results.csv and the note say so, and the
    flags read back; the finished run says nothing."""
    done = _result()
    unfinished = ComparisonResult.from_episodes(list(CONTROLLERS[:2]), [e for e in done.episodes
                                                                        if e.controller != "heuristic"],
                                                tie_threshold=done.tie_threshold, seed=11, planned=10,
                                                pending=["heuristic"])
    data = json.loads(json.dumps(unfinished.to_dict()))
    assert (data["complete"], data["episodes_done"], data["episodes_planned"]) == (False, 4, 10)
    assert data["pending_controllers"] == ["heuristic"]
    note = "incomplete: 4 of 10 paired episodes; heuristic still to run"
    assert (unfinished.incomplete_note() or "").startswith(note)
    assert unfinished.to_csv().startswith(f"# {note}")
    assert ComparisonResult.from_dict(data) == unfinished
    assert done.incomplete_note() is None and done.to_dict()["complete"] is True
    assert done.to_csv().startswith("controller,")
    assert ComparisonResult.from_episodes(list(CONTROLLERS), done.episodes, tie_threshold=done.tie_threshold,
                                          seed=11, planned=5).incomplete_note() is not None


def test_a_results_json_from_before_the_completeness_keys_reads_as_what_it_holds() -> None:
    data = json.loads(json.dumps(_result().to_dict()))
    for key in ("complete", "episodes_done", "episodes_planned", "pending_controllers"):
        del data[key]
    assert ComparisonResult.from_dict(data) == _result()


def _before_test_scores(data: dict[str, Any]) -> dict[str, Any]:
    """A results.json as written before test scores and costs: none of their keys, anywhere."""
    for stats in data["per_controller"].values():
        for key in ("final_test_accuracy", "final_test_loss", "train_flops", "wall_seconds"):
            del stats[key]
    for row in data["pairwise"].values():
        for pair in row.values():
            del pair["metric"], pair["val"]
    for episode in data["episodes"]:
        for key in ("final_test_accuracy", "final_test_loss", "train_flops", "wall_seconds"):
            del episode[key]
    for key in ("complete", "episodes_done", "episodes_planned", "pending_controllers"):
        del data[key]
    return data


def test_a_results_json_from_before_test_scores_still_reads() -> None:
    old = _before_test_scores(json.loads(json.dumps(_result().to_dict())))
    result = ComparisonResult.from_dict(old)
    stats = result.per_controller["ppo"]
    assert stats["final_test_accuracy"] is None and stats["final_test_loss"] is None
    assert stats["train_flops"] == {"mean": 0.0, "std": 0.0}  # not recorded then
    assert stats["final_accuracy"] == old["per_controller"]["ppo"]["final_accuracy"]
    pair = result.pairwise["ppo"]["static"]
    assert pair["metric"] == "val_accuracy" and pair["val"] == old["pairwise"]["ppo"]["static"]
    assert {k: v for k, v in pair.items() if k not in ("metric", "val")} == old["pairwise"]["ppo"]["static"]
    assert ComparisonResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


@pytest.mark.parametrize("damage", ["top", "controller", "ci", "test ci", "half new", "pair", "val", "metric",
                                   "episode", "reference", "progress", "plan"])
def test_a_different_results_schema_is_named(damage: str) -> None:
    data = json.loads(json.dumps(_result(tested=CONTROLLERS).to_dict()))
    if damage == "top":
        del data["pairwise"]
    elif damage == "controller":
        del data["per_controller"]["ppo"]["action_mix"]
    elif damage == "ci":
        data["per_controller"]["ppo"]["final_accuracy"] = {"mean": 1.0, "std": 0.0}
    elif damage == "test ci":
        del data["per_controller"]["ppo"]["final_test_accuracy"]["ci95"]
    elif damage == "half new":
        del data["per_controller"]["ppo"]["train_flops"]
    elif damage == "pair":
        data["pairwise"]["ppo"]["static"]["extra"] = 1
    elif damage == "val":
        del data["pairwise"]["ppo"]["static"]["val"]["verdict"]
    elif damage == "metric":
        data["pairwise"]["ppo"]["static"]["metric"] = "loss"
    elif damage == "episode":
        del data["episodes"][0]["rollbacks"]
    elif damage == "progress":
        del data["episodes_done"]
    elif damage == "plan":
        data["episodes_planned"] = "ten"
    else:
        data["reference"] = "ppo"
    with pytest.raises(LogFormatError, match=r"results\.json"):
        ComparisonResult.from_dict(data)


def test_a_copy_holds_its_source_s_episodes_and_statistics_in_the_order_asked_for() -> None:
    result = _result(tested=CONTROLLERS)
    result.matched = {"width": 1.5}
    copied = result.with_copies({"ppo (init)": "heuristic"}, ["static", "ppo (init)", "ppo", "heuristic"])
    assert copied.controllers == ["static", "ppo (init)", "ppo", "heuristic"] and copied.matched == {"width": 1.5}
    init = [e for e in copied.episodes if e.controller == "ppo (init)"]
    assert [e.to_dict() | {"controller": "heuristic"} for e in init] == [
        e.to_dict() for e in result.episodes if e.controller == "heuristic"]
    assert copied.per_controller["ppo (init)"] == result.per_controller["heuristic"]
    assert copied.pairwise["ppo"]["ppo (init)"] == result.pairwise["ppo"]["heuristic"]
    assert copied.pairwise["ppo (init)"]["heuristic"]["mean_delta"] == 0.0
    assert copied.complete and copied.pairwise["static"]["ppo"] == result.pairwise["static"]["ppo"]
    unfinished = ComparisonResult.from_episodes(list(CONTROLLERS), result.episodes, tie_threshold=0.5, seed=11,
                                                planned=6, pending=["static:matched"])
    again = unfinished.with_copies({"ppo (init)": "heuristic"}, ["static", "ppo (init)", "ppo", "heuristic"])
    assert (again.planned, again.pending, again.episodes_done) == (6, ["static:matched"], 4) and not again.complete


@pytest.mark.parametrize(("copies", "order"), [({"x": "nobody"}, ["static", "ppo", "heuristic", "x"]),
                                                ({"x": "ppo"}, ["static", "ppo", "heuristic"])])
def test_a_copy_of_nothing_or_one_left_out_of_the_order_is_refused(copies: dict[str, str], order: list[str]) -> None:
    with pytest.raises(ValueError, match="copies"):
        _result().with_copies(copies, order)
