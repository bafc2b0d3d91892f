"""Measuring the gap reward's charges: one set of static-width episodes gives λ_p and λ_c (each width's training FLOPs
beside its accuracy), the measurement is cached per setting, and a cached file is reused without measuring again."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import EpisodeResult
from esper.evaluation import param_cost as module
from esper.evaluation.comparison import host_params
from esper.evaluation.param_cost import WIDTHS, ParamCostSetting, cached_costs, measure_param_cost

TASK = get_task_spec("synthetic")
SETTING = ParamCostSetting("synthetic", 3, 64, 32, 64, episodes=4)
FLOPS = {1.0: 10**9, 1.5: 2 * 10**9, 2.0: 4 * 10**9}  # added training compute 0, 100 % and 300 %
SEED_LEVEL = (60.0, 62.0, 59.0, 61.5)  # paired seeds differ by the same amount at every width


def _episode(width: float, episode: int, accuracy: float) -> EpisodeResult:
    return EpisodeResult(controller=f"static:{width}", env_id=0, episode=episode, batch=0, env_seed=episode,
                         host_width=width, host_params=host_params(TASK, width), final_accuracy=accuracy,
                         final_loss=1.0, twin_final_accuracy=None, twin_final_loss=None, best_accuracy=accuracy,
                         seeds_created=0, seeds_fossilized=0, seeds_culled=0, params_added=0,
                         action_counts={"WAIT": 2}, accuracy_curve=[accuracy], total_reward=0.0, rollbacks=0,
                         train_flops=FLOPS[width])


def _planted(compute_slope: float) -> Any:
    """Episodes whose accuracy is the seed's level plus `compute_slope` pp per 100 % of added training compute."""
    def run(specs: Sequence[Any], plan: Any, episodes: int, pool: Any, **kwargs: Any) -> list[EpisodeResult]:
        assert [s.label for s in specs] == [f"static:{w}" for w in WIDTHS] and episodes == SETTING.episodes
        out = []
        for i in range(episodes):
            out += [_episode(w, i, SEED_LEVEL[i] + compute_slope * (FLOPS[w] / FLOPS[1.0] - 1.0)) for w in WIDTHS]
            kwargs["on_episode"](i, out[-len(WIDTHS):], [None] * len(WIDTHS))
        return out
    return run


def test_lambda_c_is_the_slope_against_added_training_compute(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.setattr(module, "run_controller_episodes", _planted(0.8))
    done: list[int] = []
    measured = measure_param_cost(TASK, SETTING, DataCache(DataOptions(data_dir=tmp_path)),
                                  progress=lambda d, n, s: done.append(d))
    assert done == [1, 2, 3, 4]
    assert measured.added_flop_ratios == (0.0, 1.0, 3.0) and measured.train_gflops == (1.0, 2.0, 4.0)
    assert measured.compute_cost == measured.compute_slope == pytest.approx(0.8)
    assert measured.compute_ci95 == pytest.approx((0.8, 0.8))  # the seeds' offsets cancel in every resample
    # λ_p comes from the same episodes, against the parameter ratios
    ratios = [host_params(TASK, w) / host_params(TASK, 1.0) - 1.0 for w in WIDTHS]
    assert measured.added_param_ratios == pytest.approx(ratios)
    assert measured.param_cost == pytest.approx(module._slope(ratios, list(measured.mean_final_accuracy)))
    assert measured.param_cost != pytest.approx(measured.compute_cost)


def test_a_negative_slope_charges_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(module, "run_controller_episodes", _planted(-0.5))
    measured = measure_param_cost(TASK, SETTING, DataCache(DataOptions(data_dir=tmp_path)))
    assert measured.compute_slope == pytest.approx(-0.5) and measured.compute_cost == 0.0
    assert measured.cost("compute") == 0.0 and measured.cost("param") == measured.param_cost == 0.0


def test_the_first_request_measures_and_caches_both_and_the_next_reuses_them(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    calls: list[ParamCostSetting] = []
    real = module.measure_param_cost

    def counted(task: Any, setting: ParamCostSetting, *args: Any, **kwargs: Any) -> Any:
        calls.append(setting)
        return real(task, setting, *args, **kwargs)

    monkeypatch.setattr(module, "run_controller_episodes", _planted(0.8))
    monkeypatch.setattr(module, "measure_param_cost", counted)
    cache = DataCache(DataOptions(data_dir=tmp_path))
    costs, path, measured = cached_costs(TASK, SETTING, cache, tmp_path)
    assert measured and costs["compute"] == pytest.approx(0.8) and len(calls) == 1
    assert path.name.endswith(f"_v{module.CACHE_VERSION}.json") and module.CACHE_VERSION == 3
    stored = json.loads(path.read_text())
    assert stored["compute_cost"] == costs["compute"] and stored["param_cost"] == costs["param"]
    assert stored["added_flop_ratios"] == [0.0, 1.0, 3.0]
    again, same, measured = cached_costs(TASK, SETTING, cache, tmp_path)
    assert (again, same, measured) == (costs, path, False) and len(calls) == 1  # a hit measures nothing
    other = ParamCostSetting("synthetic", 3, 64, 32, 128, episodes=4)  # another batch size: another setting
    assert other.cache_file(tmp_path, TASK) != SETTING.cache_file(tmp_path, TASK)
    cached_costs(TASK, other, cache, tmp_path)
    assert calls == [SETTING, other]


def test_a_cache_file_of_the_old_format_is_a_clear_error(tmp_path: Path) -> None:
    path = SETTING.cache_file(tmp_path, TASK)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"param_cost": 0.3}))  # no λ_c
    with pytest.raises(ValueError, match="delete it"):
        cached_costs(TASK, SETTING, DataCache(DataOptions(data_dir=tmp_path)), tmp_path)
