"""An ablation table: every arm's final policies against the reference study's teacher, on the reference's objective
(so an arm trained on another charge is judged by the same yardstick) and on raw test accuracy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from esper.env import EpisodeResult
from esper.evaluation.ablation import ablation_markdown, ablation_rows, read_arm
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import RunLabels
from esper.leyline.errors import UserInputError
from esper.simic.ppo.config import TrainingConfig

SEEDS = (0, 1, 2)
RULE = "grow:norm@late"
NOISE = (-0.1, 0.0, 0.1)


def _episode(controller: str, seed: int, test: float, gflops: float) -> EpisodeResult:
    return EpisodeResult(controller=controller, env_id=0, episode=seed, batch=0, env_seed=100 + seed, host_width=1.0,
                         host_params=1000, final_accuracy=test, final_loss=1.0, twin_final_accuracy=None,
                         twin_final_loss=None, best_accuracy=test, seeds_created=0, seeds_fossilized=0,
                         seeds_culled=0, params_added=0,
                         action_counts={"WAIT": 1, "GERMINATE": 0, "CULL": 0, "FOSSILIZE": 0},
                         accuracy_curve=[test] * 3, total_reward=0.0, rollbacks=0, final_test_accuracy=test,
                         final_test_loss=1.0, train_flops=int(gflops * 1e9))


def _study(path: Path, *, final: float, gflops: float, runs: int = 2, teacher: str | None = "heuristic",
           training: dict[str, Any] | None = None, seed_offset: int = 0, rule: str = "best-rule") -> Path:
    """A finished study: static at 70 %, the heuristic at 72 %, best-rule (grow:norm@late, labelled `rule`) at
    71 %, each run's init at the heuristic and its final policy at `final` (test %, spending `gflops` against
    static's 1); `training` by dotted key, recorded nested."""
    rows: dict[str, tuple[float, float]] = {"static": (70.0, 1.0), "heuristic": (72.0, 1.0), rule: (71.0, 1.0)}
    for r in range(runs):
        rows[RunLabels(r).init] = (72.0, 1.0)
        rows[RunLabels(r).final] = (final, gflops)
    episodes = [_episode(label, s + seed_offset, test + (n if label.endswith("(final)") else 0.0), g)
                for label, (test, g) in rows.items() for s, n in zip(SEEDS, NOISE, strict=True)]
    result = ComparisonResult.from_episodes(list(rows), episodes, tie_threshold=0.01, seed=0)
    study = {"runs": runs, "teacher": teacher, "objective": {"charge": "compute", "cost": 2.0},
             "chosen": {"best-rule": RULE} if rule == "best-rule" else {},
             "training": TrainingConfig.nested({"ppo.teacher": teacher or "none", "seed": 7, **(training or {})})}
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps({**result.to_dict(), "study": study}))
    return path


def test_each_arm_is_judged_against_the_reference_teacher_on_the_reference_objective(tmp_path: Path) -> None:
    # where the reference ran is no difference of the arms'
    reference = read_arm("residual", _study(tmp_path / "ref", final=73.0, gflops=1.0,
                                            training={"execution.workers": 2, "execution.executor": "process"}))
    scratch = read_arm("scratch", _study(tmp_path / "scratch", final=71.0, gflops=1.0, teacher=None))
    # +1 pp of accuracy for 50 % more compute: +1 raw, 0 on the compute-charged objective at λ 2
    param = read_arm("param", _study(tmp_path / "param", final=73.0, gflops=1.5, training={"reward.charge": "param"}))
    rows = {row["arm"]: row for row in ablation_rows(reference, [scratch, param])}
    assert rows["residual"]["objective"]["better"] == 2 and rows["residual"]["objective"]["iqm"] == pytest.approx(1.0)
    assert rows["scratch"]["objective"]["worse"] == 2 and rows["scratch"]["raw"]["iqm"] == pytest.approx(-1.0)
    assert rows["param"]["raw"]["iqm"] == pytest.approx(1.0)
    assert rows["param"]["objective"]["iqm"] == pytest.approx(0.0, abs=1e-9)
    assert rows["scratch"]["differs"] == 'ppo.teacher="none"' and rows["param"]["differs"] == 'reward.charge="param"'
    table = ablation_markdown(list(rows.values()), reference)
    assert "| scratch | ppo.teacher=\"none\" | 0 / 2 of 2 | -1.00 |" in table
    assert table.count("\n| ") == 1 + 3  # the header and one row per arm


def test_a_teacher_chosen_as_best_rule_is_the_same_teacher_as_its_spec_given_by_hand(tmp_path: Path) -> None:
    """A reference whose teacher is its chosen best-rule, and an arm given that rule by hand (no selection): the arm
    is measured against the rule under the label it has there, and a study whose best-rule is another rule is not."""
    reference = read_arm("residual", _study(tmp_path / "ref", final=73.0, gflops=1.0, teacher="best-rule"))
    by_hand = read_arm("param", _study(tmp_path / "param", final=72.0, gflops=1.0, teacher=RULE, rule=RULE))
    rows = {row["arm"]: row for row in ablation_rows(reference, [by_hand])}
    assert rows["residual"]["raw"]["iqm"] == pytest.approx(2.0) and rows["param"]["raw"]["iqm"] == pytest.approx(1.0)
    other = _study(tmp_path / "other", final=72.0, gflops=1.0, teacher="best-rule")
    data = json.loads((other / "results.json").read_text())
    data["study"]["chosen"]["best-rule"] = "grow:norm@early"
    (other / "results.json").write_text(json.dumps(data))
    with pytest.raises(UserInputError, match="did not evaluate the reference's teacher grow:norm@late"):
        ablation_rows(reference, [read_arm("other", other)])


def test_unpaired_arms_and_a_missing_teacher_are_refused(tmp_path: Path) -> None:
    reference = read_arm("residual", _study(tmp_path / "ref", final=73.0, gflops=1.0))
    other_seeds = read_arm("moved", _study(tmp_path / "moved", final=73.0, gflops=1.0, seed_offset=5))
    with pytest.raises(UserInputError, match="other evaluation seeds"):
        ablation_rows(reference, [other_seeds])
    no_teacher = read_arm("scratch", _study(tmp_path / "scratch", final=71.0, gflops=1.0, teacher=None))
    with pytest.raises(UserInputError, match="trained no residual policy"):
        ablation_rows(no_teacher, [reference])
    with pytest.raises(UserInputError, match="not found"):
        read_arm("gone", tmp_path / "gone")


def test_a_study_recorded_before_the_config_had_sections_is_refused(tmp_path: Path) -> None:
    path = _study(tmp_path / "old", final=73.0, gflops=1.0)
    data = json.loads((path / "results.json").read_text())
    data["study"]["training"] = {"teacher": "heuristic", "seed": 7, "lr": 3e-4}
    (path / "results.json").write_text(json.dumps(data))
    with pytest.raises(UserInputError, match=r"esper whose config had no sections \(lr, teacher, \.\.\. outside "
                                             r"episode, ppo, reward, execution\): rerun that study with this esper"):
        read_arm("old", path)
