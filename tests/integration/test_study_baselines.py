"""A study's baselines: `--baselines` evaluates the untrained controllers it names instead of the preset's (the cheap
evaluation of an ablation arm), refuses a list without the static host and a spec that names no controller, before
anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from esper.cli.main import build_parser
from esper.cli.study import study_plan
from esper.evaluation import StudyHooks, StudyPlan, StudyStatus, run_study
from esper.evaluation.studies.task import study_dir
from esper.leyline.errors import UserInputError

pytestmark = pytest.mark.smoke

_TINY = {"n_episodes": 2, "n_envs": 2, "group_size": 1, "max_epochs": 3, "device": "cpu", "max_train_samples": 256,
         "max_val_samples": 128, "param_cost": 1.0}


def test_a_study_evaluates_only_the_baselines_it_names(tmp_path: Path) -> None:
    result = run_study(StudyPlan(preset="quick", seeds=2, baselines=("static",), overrides=_TINY,
                                 run_dir=tmp_path / "arm"))
    assert result.status == StudyStatus.COMPLETE and result.comparison is not None
    labels = set(result.comparison.controllers)
    # quick's baselines are static, static:2 and heuristic; the heuristic runs here as the policies' teacher
    assert labels == {"static", "heuristic", "ppo[0] (init)", "ppo[0] (final)", "replay[0]"}
    assert result.results is not None and result.results.regime["convergence"] is not None


@pytest.mark.parametrize(("baselines", "message"), [
    (("heuristic",), "lack 'static'"),
    (("static", "no-such-controller"), "no-such-controller"),
])
def test_baselines_a_study_cannot_run_are_refused_before_anything_is_written(
        tmp_path: Path, baselines: tuple[str, ...], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        run_study(StudyPlan(preset="quick", seeds=2, baselines=baselines, overrides=_TINY, run_dir=tmp_path / "arm"))
    assert not (tmp_path / "arm").exists()


def test_a_baseline_also_given_as_an_extra_controller_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="distinct"):
        run_study(StudyPlan(preset="quick", seeds=2, baselines=("static", "random"), controllers=("random",),
                            overrides=_TINY, run_dir=tmp_path / "arm"))
    assert not (tmp_path / "arm").exists()


def test_a_family_study_refuses_baselines() -> None:
    with pytest.raises(UserInputError, match="--baselines does not apply to --family"):
        run_study(StudyPlan(family="synthetic-shift-v1", baselines=("static",)))


def test_the_flag_fills_the_plan_and_names_its_own_study_directory(tmp_path: Path) -> None:
    def plan(*argv: str) -> StudyPlan:
        args = build_parser().parse_args(["study", "--preset", "quick", "--runs-root", str(tmp_path), *argv])
        args.argv = []
        return study_plan(args, StudyHooks())

    arm, full = plan("--baselines", "static", "static:2"), plan()
    assert arm.baselines == ("static", "static:2") and full.baselines is None
    assert study_dir(arm) != study_dir(full)  # another evaluation, another directory


def test_without_the_flag_a_study_keeps_the_directory_name_it_had_before_the_flag(tmp_path: Path) -> None:
    """A study is continued by rerunning its command: a new flag left unset must not rename the default directory
    (these names were made by esper before --baselines existed)."""
    args = build_parser().parse_args(["study", "--preset", "fashion_mnist", "--set", "charge=compute"])
    args.argv = []
    assert study_dir(study_plan(args, StudyHooks())).name == "study_fashion_mnist_s42_25260327"
    assert study_dir(StudyPlan(preset="synthetic", runs_root=tmp_path)).name == "study_synthetic_s42_93d0d9f7"
