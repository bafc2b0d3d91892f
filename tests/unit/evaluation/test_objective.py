"""`charged_gaps`: a controller's accuracy above the paired static episode's, net of the charge for the training
compute or parameters it added, per seed and as a mean with its t-interval."""

from __future__ import annotations

import pytest

from esper.env import EpisodeResult
from esper.evaluation.objective import charged_gaps
from esper.evaluation.results import ComparisonResult
from esper.evaluation.stats import t_interval


def _episode(controller: str, episode: int, test: float | None, *, val: float = 50.0, gflops: float = 1.0,
             host: int = 1000, added: int = 0) -> EpisodeResult:
    return EpisodeResult(controller=controller, env_id=0, episode=episode, batch=0, env_seed=episode, host_width=1.0,
                         host_params=host, final_accuracy=val, final_loss=1.0, twin_final_accuracy=None,
                         twin_final_loss=None, best_accuracy=val, seeds_created=0, seeds_fossilized=0,
                         seeds_culled=0, params_added=added, action_counts={"WAIT": 1}, accuracy_curve=[val],
                         total_reward=0.0, rollbacks=0, final_test_accuracy=test,
                         final_test_loss=None if test is None else 1.0, train_flops=int(gflops * 1e9))


def _result(episodes: list[EpisodeResult], controllers: list[str]) -> ComparisonResult:
    return ComparisonResult(controllers, episodes, tie_threshold=0.05, seed=0)


STATIC = [_episode("static", s, 70.0 + s, val=60.0 + s) for s in range(3)]
# +2 pp on test for 50 % more training compute and 20 % more parameters; +1 pp on validation
GROWN = [_episode("grow", s, 72.0 + s + 0.5 * (s == 2), val=61.0 + s, gflops=1.5, added=200) for s in range(3)]
WIDE = [_episode("static:2", s, 73.0 + s, gflops=3.0, host=2800) for s in range(3)]


def test_the_compute_charge_prices_the_added_training_compute() -> None:
    gaps = charged_gaps(_result([*STATIC, *GROWN, *WIDE], ["static", "grow", "static:2"]), "compute", 2.0)
    assert set(gaps) == {"grow", "static:2"}  # relative to static, which is not scored against itself
    grow = gaps["grow"]
    assert grow["per_seed"] == pytest.approx([2.0 - 1.0, 2.0 - 1.0, 2.5 - 1.0])  # λ_c 2 × 50 %
    assert grow["mean_delta"] == pytest.approx(7.0 / 6.0)
    assert grow["ci95"] == pytest.approx(list(t_interval(grow["per_seed"])))
    assert (grow["charge"], grow["cost"]) == ("compute", 2.0)
    assert gaps["static:2"]["per_seed"] == pytest.approx([3.0 - 4.0] * 3)  # 200 % more compute


def test_the_param_charge_prices_the_parameters_beyond_the_static_host() -> None:
    gaps = charged_gaps(_result([*STATIC, *GROWN, *WIDE], ["static", "grow", "static:2"]), "param", 2.0)
    assert gaps["grow"]["per_seed"] == pytest.approx([2.0 - 0.4, 2.0 - 0.4, 2.5 - 0.4])  # 200 seed / 1000 host
    assert gaps["static:2"]["per_seed"] == pytest.approx([3.0 - 3.6] * 3)  # a wider host's parameters count too
    free = charged_gaps(_result([*STATIC, *GROWN], ["static", "grow"]), "param", 0.0)
    assert free["grow"]["per_seed"] == pytest.approx([2.0, 2.0, 2.5])


def test_the_validation_split_reads_the_final_validation_accuracy() -> None:
    gaps = charged_gaps(_result([*STATIC, *GROWN], ["static", "grow"]), "compute", 2.0, split="val")
    assert gaps["grow"]["per_seed"] == pytest.approx([0.0, 0.0, 0.0])


def test_a_controller_without_test_scores_is_left_out() -> None:
    untested = [_episode("ppo", s, None) for s in range(3)]
    assert charged_gaps(_result([*STATIC, *untested], ["static", "ppo"]), "compute", 1.0) == {}


@pytest.mark.parametrize(("args", "message"), [
    (("flops", 1.0), "charge"), (("compute", -1.0), "cost"), (("compute", float("nan")), "cost"),
    (("compute", 1.0, "train"), "split"),
])
def test_bad_arguments_are_refused(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        charged_gaps(_result([*STATIC, *GROWN], ["static", "grow"]), *args)  # type: ignore[arg-type]


def test_it_needs_a_paired_static_episode() -> None:
    with pytest.raises(ValueError, match="'static' controller"):
        charged_gaps(_result(GROWN, ["grow"]), "compute", 1.0)
    extra = [*GROWN, _episode("grow", 7, 80.0)]
    with pytest.raises(ValueError, match=r"\[7\] have no paired static"):
        charged_gaps(_result([*STATIC, *extra], ["static", "grow"]), "compute", 1.0)
