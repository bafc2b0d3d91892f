"""Whether a study is about growth: the static host's convergence and the capacity headroom are computed from the
episodes, a host still climbing is flagged, and the static frontier is read at each controller's own cost; a training
run's cost counts the static twins its groups trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.env import EpisodeResult
from esper.env.rewards import RewardFamily
from esper.evaluation.regime import SLOPE_THRESHOLD, convergence, frontier_gaps, has_headroom, headroom
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import RunLabels
from esper.evaluation.study import study_results, training_cost
from esper.evaluation.study_report import convergence_line, summary_markdown


def _episode(controller: str, episode: int, curve: list[float], test: float, flops: float = 1e9,
             params: int = 1000, added: int = 0, created: int = 0) -> EpisodeResult:
    return EpisodeResult(controller=controller, env_id=0, episode=episode, batch=0, env_seed=episode, host_width=1.0,
                         host_params=params, final_accuracy=curve[-1], final_loss=1.0, twin_final_accuracy=None,
                         twin_final_loss=None, best_accuracy=max(curve), seeds_created=created, seeds_fossilized=0,
                         seeds_culled=0, params_added=added, action_counts={"WAIT": 1, "GERMINATE": 0,
                                                                            "FOSSILIZE": 0, "CULL": 0},
                         accuracy_curve=curve, total_reward=0.0, rollbacks=0, final_test_accuracy=test,
                         final_test_loss=1.0, train_flops=int(flops))


def _rising(seed: int, slope: float, epochs: int = 30) -> list[float]:
    return [50.0 + slope * t + (0.3 if (t + seed) % 2 else -0.3) for t in range(epochs)]


def _plateau(seed: int, epochs: int = 30) -> list[float]:
    return [min(80.0, 40.0 + 4.0 * t) + (0.3 if (t + seed) % 2 else -0.3) for t in range(epochs)]


def test_a_planted_host_still_climbing_is_flagged_and_a_plateau_is_not() -> None:
    climbing = convergence([_episode("static", s, _rising(s, 0.8), 60.0) for s in range(6)])
    assert not climbing["converged"] and climbing["slope_pp_per_epoch"] == pytest.approx(0.8, abs=0.05)
    assert climbing["epochs"] == list(range(25, 31))  # the last 20 % of 30 epochs
    flat = convergence([_episode("static", s, _plateau(s), 80.0) for s in range(6)])
    assert flat["converged"] and abs(flat["slope_pp_per_epoch"]) <= SLOPE_THRESHOLD
    assert "NOT CONVERGED" in convergence_line({"convergence": climbing, "headroom": {}})
    assert "NOT CONVERGED" not in convergence_line({"convergence": flat, "headroom": {}})


def _comparison(episodes: list[EpisodeResult], controllers: list[str]) -> ComparisonResult:
    return ComparisonResult.from_episodes(controllers, episodes, tie_threshold=0.05, seed=0)


def test_headroom_and_the_static_frontier_come_from_the_episodes() -> None:
    statics = {"static:0.5": (0.5, 70.0), "static": (1.0, 75.0), "static:1.5": (2.0, 77.0), "static:2": (3.0, 78.0)}
    episodes = [_episode(label, s, _plateau(s), test + 0.1 * s, flops=gflops * 1e9)
                for label, (gflops, test) in statics.items() for s in range(4)]
    # a grown controller at 1.5 GFLOPs scoring 78 + 0.1·s: the frontier there is halfway between 75 and 77
    episodes += [_episode("grow:norm@early", s, _plateau(s), 78.0 + 0.1 * s, flops=1.5e9, created=1)
                 for s in range(4)]
    episodes += [_episode("best-fixed", s, _plateau(s), 81.0 + 0.1 * s, flops=5e9) for s in range(4)]
    result = _comparison(episodes, [*statics, "grow:norm@early", "best-fixed"])
    room = headroom(result)
    assert room["static:2"]["mean_delta"] == pytest.approx(3.0)
    assert room["best-fixed"]["mean_delta"] == pytest.approx(6.0)
    assert has_headroom(room) and not has_headroom({"static:2": {**room["static:2"], "mean_delta": 0.5}})
    gaps = frontier_gaps(result, "gflops")
    assert gaps["grow:norm@early"]["mean_delta"] == pytest.approx(2.0)
    assert gaps["best-fixed"]["mean_delta"] is None  # beyond the widest static host's compute: not read off
    assert set(gaps) == {"grow:norm@early", "best-fixed"}


def test_study_results_and_summary_state_the_regime_first() -> None:
    episodes = [_episode(label, s, _rising(s, 0.5), 70.0 + s) for label in ("static", "static:2") for s in range(3)]
    run = RunLabels(0)
    for label, test in ((run.init, 70.0), (run.final, 72.0), (run.replay, 71.0)):
        episodes += [_episode(label, s, _rising(s, 0.5), test + s) for s in range(3)]
    result = _comparison(episodes, ["static", "static:2", run.init, run.final, run.replay])
    cost = {"env_epochs": 10, "gflops": 1.0}
    study = study_results(result, 1, chosen={}, selection=None, training=[cost], replay_sources=[cost])
    assert study.regime["convergence"]["converged"] is False
    assert study.cost_to_obtain[run.final] == cost and study.cost_to_obtain["static"]["env_epochs"] == 0
    assert study.cost_to_obtain[run.replay] == {"env_epochs": 20, "gflops": 2.0}
    final_vs_init = next(a for a in study.aggregate if a["x"] == "ppo (final)" and a["y"] == "ppo (init)")
    assert final_vs_init["mean"] == pytest.approx(2.0) and final_vs_init["runs"] == 1
    summary = summary_markdown(result, study, title="t", command="c")
    assert summary.splitlines()[2].startswith("**WARNING: NOT CONVERGED**")
    assert "| 0 | 73.00 | +2.00 [+2.00, +2.00] |" in summary  # run 0: its test mean, then Δ vs static


def test_a_training_run_costs_its_episodes_and_under_the_gap_reward_one_static_twin_per_group(tmp_path: Path) -> None:
    episodes = [_episode("ppo", s, [50.0] * 5, 50.0, flops=2e9) for s in range(8)]  # 8 episodes of 5 epochs, 2 GFLOPs
    (tmp_path / EpisodeResult.FILE).write_text("".join(json.dumps(e.to_dict()) + "\n" for e in episodes))
    twin = {"env_epochs": 5, "gflops": 1.0}
    assert training_cost(tmp_path, twin, group_size=4, reward_family=RewardFamily.GAP) == {"env_epochs": 40 + 2 * 5,
                                                                                           "gflops": 16.0 + 2 * 1.0}
    no_twin = {"env_epochs": 40, "gflops": 16.0}
    assert training_cost(tmp_path, twin, group_size=4, reward_family=RewardFamily.CONTRIBUTION) == no_twin
