"""The room a teacher leaves: each one-epoch deviation against its teacher on the same seeds, on the objective and on
raw test accuracy, the per-seed best over them, and the table; comparisons that cannot be read so are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.env import EpisodeResult
from esper.evaluation.deviations import (
    DeviationRun,
    deviation_markdown,
    deviation_rows,
    noise_floor,
    per_seed_best,
    read_deviation_run,
)
from esper.evaluation.results import ComparisonResult
from esper.evaluation.stats import t_interval
from esper.leyline import LifecycleOp
from esper.leyline.errors import UserInputError

TEACHER = "grow:norm@late"
LATE = f"deviate:5:germinate=norm@mid:{TEACHER}"
WAIT = f"deviate:1:wait:{TEACHER}"

WAITED = {op.name: int(op == LifecycleOp.WAIT) for op in LifecycleOp}


def _episode(controller: str, episode: int, test: float, gflops: float) -> EpisodeResult:
    return EpisodeResult(controller=controller, env_id=0, episode=episode, batch=0, env_seed=episode, host_width=1.0,
                         host_params=1000, final_accuracy=50.0, final_loss=1.0, twin_final_accuracy=None,
                         twin_final_loss=None, best_accuracy=50.0, seeds_created=0, seeds_fossilized=0,
                         seeds_culled=0, params_added=0, action_counts=WAITED, accuracy_curve=[50.0],
                         total_reward=0.0, rollbacks=0, final_test_accuracy=test, final_test_loss=1.0,
                         train_flops=int(gflops * 1e9))


def _run(result: ComparisonResult, cost: float, specs: dict[str, str] | None = None) -> DeviationRun:
    """The run, each deviation having taken place on every seed but WAIT (the teacher's own choice: on none)."""
    return DeviationRun(result, specs or {}, "compute", cost, {c: {0, 1, 2} for c in result.controllers if c != WAIT})


def _result(controllers: list[str]) -> ComparisonResult:
    rows = {"static": [(70.0, 1.0), (71.0, 1.0), (72.0, 1.0)],
            TEACHER: [(72.0, 1.5), (73.0, 1.5), (74.0, 1.5)],
            LATE: [(73.0, 2.0), (73.5, 2.0), (76.0, 2.0)],  # +1, +0.5, +2 raw for 50 % more compute than static
            WAIT: [(72.0, 1.5), (73.0, 1.5), (74.0, 1.5)]}  # the wait was the teacher's own: the same episodes
    episodes = [_episode(c, s, test, gflops) for c in controllers for s, (test, gflops) in enumerate(rows[c])]
    return ComparisonResult(controllers, episodes, tie_threshold=0.05, seed=7)


def test_each_deviation_is_its_objective_minus_its_teachers_on_the_same_seed_best_first() -> None:
    teacher, rows = deviation_rows(_run(_result(["static", TEACHER, WAIT, LATE]), 2.0))
    assert teacher == TEACHER
    assert [r.label for r in rows] == [LATE, WAIT]
    late = rows[0]
    assert (late.epoch, late.action) == (5, "germinate=norm@mid")
    # λ_c 2 × (100 % − 50 %) more compute than static: 1 pp of objective more than its raw difference costs
    assert late.objective == pytest.approx([1.0 - 1.0, 0.5 - 1.0, 2.0 - 1.0])
    assert late.raw == pytest.approx([1.0, 0.5, 2.0])
    assert late.counts(0.05) == (1, 1) and late.took_place == 3
    assert rows[1].objective == [0.0, 0.0, 0.0] and rows[1].counts(0.05) == (0, 0) and rows[1].took_place == 0
    assert per_seed_best(rows) == pytest.approx([0.0, 0.0, 1.0])  # the teacher itself where every deviation loses
    # LATE's mean (1/6) taken out of each of its seeds: what the bound would be if it were the teacher on average
    assert noise_floor(rows) == pytest.approx([0.0, 0.0, 1.0 - 1.0 / 6.0])


def test_the_static_host_may_be_the_teacher() -> None:
    grow = "deviate:2:germinate=norm@mid:static"
    result = _result(["static", TEACHER])
    episodes = [*result.episodes, *(EpisodeResult(**{**e.to_dict(), "controller": grow})
                                    for e in result.episodes if e.controller == TEACHER)]
    teacher, rows = deviation_rows(_run(ComparisonResult(["static", grow], [e for e in episodes
                                                                            if e.controller != TEACHER],
                                                         tie_threshold=0.05, seed=7), 0.0))
    assert teacher == "static" and rows[0].objective == pytest.approx([2.0, 2.0, 2.0])


@pytest.mark.parametrize(("controllers", "message"), [
    (["static", TEACHER], "ran no deviate:EPOCH:ACTION:TEACHER controller"),
    (["static", LATE], f"did not run {TEACHER}: add them to --controllers"),
    ([TEACHER, LATE], "did not run static: add them"),
])
def test_a_comparison_without_deviations_their_teacher_or_the_static_host_is_refused(
        controllers: list[str], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        deviation_rows(_run(_result(controllers), 1.0))


def test_a_deviation_is_read_from_its_spec_where_its_label_shortens_a_path() -> None:
    record = "runs/tuned/heuristic.json"
    teacher, deviation = f"heuristic:{record}", f"deviate:5:germinate=norm@mid/linear:heuristic:{record}"
    result = _result(["static", TEACHER, LATE])
    labels = {TEACHER: "heuristic:heuristic.json", LATE: "deviate:5:germinate=norm@mid/linear:heuristic:heuristic.json"}
    renamed = ComparisonResult(["static", *labels.values()],
                               [EpisodeResult(**{**e.to_dict(), "controller": labels.get(e.controller, e.controller)})
                                for e in result.episodes], tie_threshold=0.05, seed=7)
    specs = {labels[TEACHER]: teacher, labels[LATE]: deviation}
    name, rows = deviation_rows(_run(renamed, 2.0, specs))
    assert name == labels[TEACHER]
    assert (rows[0].label, rows[0].epoch, rows[0].action) == (labels[LATE], 5, "germinate=norm@mid/linear")
    assert rows[0].objective == pytest.approx([0.0, -0.5, 1.0])


def test_deviations_of_two_teachers_are_refused() -> None:
    other = "deviate:1:wait:grow:norm@mid"
    result = _result(["static", TEACHER, LATE])
    result.controllers.append(other)
    result.episodes.extend(EpisodeResult(**{**e.to_dict(), "controller": other})
                           for e in list(result.episodes) if e.controller == TEACHER)
    with pytest.raises(UserInputError, match="overrule 2 teachers"):
        deviation_rows(_run(result, 1.0))


def test_the_table_counts_the_intervals_above_zero_and_gives_the_per_seed_best() -> None:
    table = deviation_markdown(_run(_result(["static", TEACHER, WAIT, LATE]), 2.0))
    low, high = t_interval([0.0, -0.5, 1.0])
    assert f"| 5 | germinate=norm@mid | 3 of 3 | 1 / 1 of 3 | +0.17 [{low:+.2f}, {high:+.2f}] |" in table
    assert "| 1 | wait | 0 of 3 | 0 / 0 of 3 | +0.00 [+0.00, +0.00] | +0.00 [+0.00, +0.00] |" in table
    assert "above 0: 0 of the 1 that took place (below 0: 0)" in table and "incomplete" not in table
    assert "fresh seeds" not in table  # one deviation measured: nothing was picked among several
    assert "base seed 7" in table and "λ = 2.000 pp per 100 % more training compute" in table
    best_low, best_high = t_interval([0.0, 0.0, 1.0])
    assert f"+0.33 [{best_low:+.2f}, {best_high:+.2f}] pp on the objective" in table
    floor_low, floor_high = t_interval([0.0, 0.0, 5.0 / 6.0])
    floor = f"+0.28 [{floor_low:+.2f}, {floor_high:+.2f}]"
    assert f"noise alone, every deviation moved to the teacher's mean, gives {floor}" in table


def test_the_best_of_several_deviations_is_sent_to_fresh_seeds() -> None:
    both = DeviationRun(_result(["static", TEACHER, WAIT, LATE]), {}, "compute", 2.0, {LATE: {0, 1, 2}, WAIT: {0}})
    assert "The best of 2 deviations is picked on these seeds" in deviation_markdown(both)


def test_an_unfinished_comparison_is_scored_as_far_as_it_ran_and_says_so() -> None:
    made = _result(["static", TEACHER, LATE])
    unfinished = ComparisonResult.from_episodes(made.controllers, made.episodes, tie_threshold=0.05, seed=7, planned=5)
    assert "**incomplete: 3 of 5 paired episodes" in deviation_markdown(_run(unfinished, 1.0))


def _write_run(path: Path, config: dict[str, object]) -> None:
    path.mkdir()
    made = _result(["static", TEACHER, LATE])
    result = ComparisonResult.from_episodes(made.controllers, made.episodes, tie_threshold=0.05, seed=7)
    (path / ComparisonResult.FILE).write_text(json.dumps(result.to_dict()), encoding="utf-8")
    steps = [{"controller": LATE, "episode": 1, "reason": "Deviate from grow at epoch 5"},
             {"controller": LATE, "episode": 2, "reason": "Grow: grow:norm@late under way"}]
    (path / "steps.jsonl").write_text("".join(json.dumps(step) + "\n" for step in steps), encoding="utf-8")
    (path / "config.json").write_text(json.dumps({"config": {"controllers": result.controllers,
                                                              "specs": result.controllers, **config}}),
                                      encoding="utf-8")


def test_a_run_is_read_with_its_charge_and_its_given_or_measured_cost(tmp_path: Path) -> None:
    base = {"charge": "compute", "compute_cost": 1.5, "param_cost": None, "task": "synthetic",
            "max_train_samples": None}
    _write_run(tmp_path / "given", base)
    run = read_deviation_run(tmp_path / "given")
    assert (run.charge, run.cost, run.result.controllers) == ("compute", 1.5, ["static", TEACHER, LATE])
    assert run.took_place == {LATE: {1}}
    _write_run(tmp_path / "none", {**base, "compute_cost": None, "task": "cifar10", "max_train_samples": 3})
    with pytest.raises(UserInputError, match=r"charged no λ .* rerun the comparison with --compute-cost"):
        read_deviation_run(tmp_path / "none")
    with pytest.raises(UserInputError, match=r"not found: deviations are read from a finished `esper compare`"):
        read_deviation_run(tmp_path / "missing")
    (tmp_path / "given" / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(UserInputError, match=r"is not an `esper compare` run directory that can be read"):
        read_deviation_run(tmp_path / "given")
