"""Episode files: strict JSON with nulls for non-finite floats, atomic writes, and the structural validator."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from esper.datagen.schema import (
    SCHEMA_VERSION,
    finite_or_none,
    read_json,
    remove_stale_temp_files,
    validate_episode,
    write_strict_json,
)
from unit.datagen.support import make_episode


def test_finite_or_none() -> None:
    value = {"a": [1.0, math.nan, math.inf], "b": (2, -math.inf), "c": {"d": "x", 3: None}}
    assert finite_or_none(value) == {"a": [1.0, None, None], "b": [2, None], "c": {"d": "x", "3": None}}


def test_write_strict_json_writes_strict_json_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "x.json"
    write_strict_json(path, {"v": math.nan, "w": [1.5]})
    text = path.read_text()
    assert json.loads(text) == {"v": None, "w": [1.5]} and "NaN" not in text
    write_strict_json(path, {"v": 2})
    assert read_json(path) == {"v": 2}
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]


def test_failed_write_keeps_the_old_file_and_cleans_up(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    write_strict_json(path, {"v": 1})
    with pytest.raises(TypeError):
        write_strict_json(path, {"v": object()})
    assert read_json(path) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_read_json_and_stale_temp_cleanup(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"trunc')
    assert read_json(tmp_path / "bad.json") is None
    assert read_json(tmp_path / "missing.json") is None
    (tmp_path / "ep.json.tmp").write_text("partial")  # what a killed write_strict_json leaves
    (tmp_path / "keep.tmp").write_text("not ours")
    assert remove_stale_temp_files(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "keep.tmp"]
    assert os.path.exists(tmp_path / "keep.tmp")


def test_a_well_formed_episode_passes() -> None:
    episode = make_episode()
    assert episode["schema_version"] == SCHEMA_VERSION == "3.0.0"
    assert validate_episode(episode) == []
    # Non-finite values are the health checks' business: nulls pass the structural check.
    episode["decisions"][0]["observation"]["features"][3] = None
    assert validate_episode(json.loads(json.dumps(finite_or_none(episode)))) == []


def _broken(path: list[Any], value: Any, delete: bool = False) -> dict[str, Any]:
    episode = make_episode()
    target: Any = episode
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return episode


@pytest.mark.parametrize(
    ("path", "value", "delete", "problem"),
    [
        (["schema_version"], "2.1.0", False, "schema_version must be '3.0.0'"),
        (["reward_family"], "accuracy", False, "reward_family must be one of ['gap', 'contribution', 'loss', 'spars"),
        (["feature_schema"], None, True, "feature_schema.blueprints must be a list"),
        (["twin"], None, True, "twin.twin_id is missing"),
        (["twin", "val_loss_curve"], None, False, "twin.val_loss_curve must be a list"),
        (["final_features"], [0.0] * 79, False, "final_features must be a list of 80"),
        (["behavior_policy"], {}, False, "behavior_policy.policy_id is missing"),
        (["episode_length"], 3, False, "episode_length 3 != 4 decisions"),
        (["decisions"], [], False, "decisions must be a non-empty list"),
        (["decisions", 0, "observation", "features"], ["x"] * 80, False, "holds non-numeric entries"),
        (["decisions", 1, "action", "action"], "ADD", False, "decisions[1].action.action must be one of"),
        (["decisions", 1, "action", "joint_index"], 43, False, "joint_index must be an int in [0, 43)"),
        (["decisions", 2, "action", "joint_behavior_prob"], None, True, "joint_behavior_prob is missing"),
        (["decisions", 2, "valid_joint_actions"], [True] * 42, False, "valid_joint_actions must be 43 booleans"),
        (["decisions", 3, "rewards", "loss"], None, True, "decisions[3].rewards.loss.total is missing"),
        (["decisions", 3, "rewards", "gap", "total"], None, True, "decisions[3].rewards.gap.total is missing"),
        (["decisions", 3, "rewards"], None, True, "decisions[3].rewards is missing"),
        (["decisions", 3, "outcome", "reward"], 99.0, False, "outcome.reward differs from the stored (gap) family"),
        (["decisions", 3, "outcome", "return_to_go"], None, True, "decisions[3].outcome.return_to_go is missing"),
        (["decisions", 0, "outcome"], None, True, "decisions[0].outcome is missing"),
    ],
)
def test_validator_names_each_problem(path: list[Any], value: Any, delete: bool, problem: str) -> None:
    problems = validate_episode(_broken(path, value, delete))
    assert any(problem in p for p in problems), problems


def test_validator_rejects_non_objects() -> None:
    assert validate_episode([1, 2]) == ["the episode is not a JSON object"]
