"""Commands that only log the reward run on tasks and sample caps without a measured λ_p: the parameter term is
left out and recorded as "not charged"; a command that learns from the reward still refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.cli.main import main
from esper.data.tasks import get_task_spec
from esper.env.charges import measured_cost
from esper.env.rewards import NOT_CHARGED, GapRewardConfig, reward_config, reward_summary
from esper.storage.rundir import read_jsonl

TINY = ["--task", "synthetic_text", "--max-epochs", "3", "--max-train-samples", "64", "--max-val-samples", "32",
        "--max-test-samples", "32", "--no-tui", "--no-tensorboard", "--telemetry-level", "minimal"]


def test_the_task_has_no_calibration_so_these_tests_mean_something() -> None:
    assert measured_cost("param", "synthetic_text", 64) is None


def test_a_logged_only_reward_leaves_the_parameter_term_uncharged() -> None:
    task = get_task_spec("synthetic_text")
    config = reward_config("gap", task, max_train_samples=64, logged_only=True)
    assert config == GapRewardConfig(cost=0.0, lm=True, charged=False)
    assert NOT_CHARGED in reward_summary("gap", task, max_train_samples=64, logged_only=True)
    with pytest.raises(ValueError, match="--set param_cost=C"):
        reward_config("gap", task, max_train_samples=64)
    calibrated = get_task_spec("synthetic")
    assert reward_config("gap", calibrated, max_train_samples=192, logged_only=True) == \
        reward_config("gap", calibrated, max_train_samples=192)  # a measured λ_p is charged whoever reads it


def test_train_heuristic_runs_and_records_the_term_as_not_charged(tmp_path: Path) -> None:
    run = tmp_path / "h"
    assert main(["train", "heuristic", "--run-dir", str(run), *TINY]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["runtime"]["param_cost"] == NOT_CHARGED
    steps = read_jsonl(run / "steps.jsonl")
    assert steps and all(s["reward_components"]["param_cost"] == 0.0 for s in steps)
    [started] = [e for e in read_jsonl(run / "events.jsonl") if e["event_type"] == "TRAINING_STARTED"]
    assert NOT_CHARGED in started["data"]["reward"]


def test_compare_runs_where_no_parameter_cost_was_measured(tmp_path: Path) -> None:
    run = tmp_path / "c"
    assert main(["compare", "--controllers", "static", "heuristic", "--episodes", "1", "--run-dir", str(run),
                 *TINY]) == 0
    assert json.loads((run / "config.json").read_text())["runtime"]["param_cost"] == NOT_CHARGED


def test_train_ppo_learns_from_the_reward_and_still_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    code = main(["train", "ppo", "--task", "synthetic_text", "--run-dir", str(tmp_path / "p"), "--no-tui",
                 "--no-tensorboard", "--set", "max_train_samples=64", "--set", "max_val_samples=32"])
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "synthetic_text" in err and "--set param_cost=C" in err


def test_the_compute_charge_is_left_out_the_same_way_and_charged_where_given(tmp_path: Path) -> None:
    run = tmp_path / "h"
    assert main(["train", "heuristic", "--run-dir", str(run), "--charge", "compute", *TINY]) == 0
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["runtime"]["compute_cost"] == NOT_CHARGED and recorded["config"]["charge"] == "compute"
    [started] = [e for e in read_jsonl(run / "events.jsonl") if e["event_type"] == "TRAINING_STARTED"]
    assert started["data"]["reward"].startswith("gap, λ_c not charged")
    charged = tmp_path / "c"
    assert main(["compare", "--controllers", "static", "random", "--episodes", "1", "--run-dir", str(charged),
                 "--charge", "compute", "--compute-cost", "0.8", *TINY]) == 0
    assert json.loads((charged / "config.json").read_text())["runtime"]["compute_cost"] == 0.8
    [started] = [e for e in read_jsonl(charged / "events.jsonl") if e["event_type"] == "TRAINING_STARTED"]
    assert started["data"]["reward"] == "gap, λ_c 0.8 per 100 % training compute"
    steps = read_jsonl(charged / "steps.jsonl")
    assert all(s["reward_components"]["action_shaping"] == 0.0 for s in steps)
    static = [s for s in steps if s["controller"] == "static"]
    assert static and all(s["reward_components"]["rent"] == 0.0 for s in static)  # the twin itself: no extra


def test_a_compute_cost_without_the_compute_charge_names_the_fix(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "heuristic", "--run-dir", str(tmp_path / "h"), "--compute-cost", "0.8", *TINY]) == 2
    assert "charge 'compute'" in " ".join(capsys.readouterr().err.split())
