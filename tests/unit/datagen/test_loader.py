"""load_transitions and the strict reader: rows, rewards by family, schema versions, and one clear error each."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from esper.datagen.loader import load_transitions
from esper.datagen.reader import EpisodeFormatError, check_resumable, read_episodes
from esper.datagen.schema import write_strict_json
from esper.env.rewards import RewardFamily
from unit.datagen.support import FAMILY_SCALE, make_episode

OPS_A = ("WAIT", "GERMINATE", "WAIT", "FOSSILIZE")
OPS_B = ("GERMINATE", "CULL", "WAIT")


def _write(directory: Path, *episodes: dict[str, Any]) -> None:
    for e in episodes:
        write_strict_json(directory / f"{e['episode_id']}.json", e)


def _with_final(episode: dict[str, Any]) -> dict[str, Any]:
    episode["final_features"] = [0.5] * len(episode["final_features"])
    episode["enabled_slots"] = ["early", "mid", "late"]
    return episode


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Path:
    _write(tmp_path, _with_final(make_episode("baseline_baseline_0000", OPS_A)),
           _with_final(make_episode("baseline_aggressive_0000", OPS_B, policy_id="aggressive")))
    (tmp_path / "manifest.json").write_text("{}")
    return tmp_path


def test_rows_follow_the_episodes(dataset_dir: Path) -> None:
    data = load_transitions(dataset_dir)
    assert len(data) == len(OPS_A) + len(OPS_B) and data.num_episodes == 2
    names = {v: k for k, v in data.episode_names.items()}
    a = names["baseline_baseline_0000"]
    rows = (data.episode_ids == a).nonzero().squeeze(1)
    assert data.step_indices[rows].tolist() == list(range(len(OPS_A)))
    assert data.dones[rows].tolist() == [False, False, False, True]
    assert torch.equal(data.next_states[rows[:-1]], data.states[rows[1:]])
    assert data.next_states[rows[-1]].tolist() == [0.5] * data.state_dim  # the final measurement
    assert not bool(data.next_valid[rows[-1]].any())  # nothing follows a terminal state
    assert data.rewards[rows].tolist() == pytest.approx([0.1 * t for t in range(len(OPS_A))])
    assert data.behavior_logp[rows].tolist() == pytest.approx(
        [math.log(0.25), math.log(0.25 / 3), math.log(0.25), math.log(0.25 / 3)])
    assert data.behavior_policies[a] == "baseline" and set(data.behavior_policies.values()) == {"baseline",
                                                                                                 "aggressive"}


def test_rewards_come_from_the_family_asked_for(dataset_dir: Path) -> None:
    gap = load_transitions(dataset_dir)
    for family in RewardFamily:
        assert torch.allclose(load_transitions(dataset_dir, family.value).rewards, FAMILY_SCALE[family] * gap.rewards)
    scaled = load_transitions(dataset_dir, reward_scale=0.1)
    assert torch.allclose(scaled.rewards, 0.1 * gap.rewards)
    with pytest.raises(ValueError, match=r"Unknown reward_source 'gaps' \(did you mean 'gap'\?\)"):
        load_transitions(dataset_dir, "gaps")


def test_an_older_schema_is_refused_naming_the_fix(tmp_path: Path) -> None:
    """Files of an earlier schema are never converted: reading or resuming them says how to regenerate them."""
    episode = _with_final(make_episode(ops=OPS_A))
    episode["schema_version"] = "2.1.0"
    _write(tmp_path, episode)
    message = (r"has episode schema '2\.1\.0'; this esper reads schema 3\.0\.0 only: regenerate the dataset .* "
               r"`esper datagen --output-dir DIR`")
    for read in (read_episodes, load_transitions, check_resumable):
        with pytest.raises(EpisodeFormatError, match=message):
            read(tmp_path)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda e: e.update(schema_version="9.0.0"), "has episode schema '9.0.0'"),
    (lambda e: e.update(feature_schema={"name": "other-obs-v9"}), "holds observation features 'other-obs-v9'"),
    (lambda e: e["decisions"][0].pop("valid_joint_actions"), "malformed schema-3.0.0 episode"),
])
def test_foreign_or_malformed_episodes_are_one_clear_error(tmp_path: Path, mutate: Any, message: str) -> None:
    episode = _with_final(make_episode())
    mutate(episode)
    _write(tmp_path, episode)
    with pytest.raises(EpisodeFormatError, match=message):
        read_episodes(tmp_path)
    with pytest.raises(EpisodeFormatError):
        check_resumable(tmp_path)


def test_truncated_files_and_empty_or_doubled_selections_are_errors(tmp_path: Path, dataset_dir: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.json").write_text('{"schema_version": "3.0.0", "decis')
    with pytest.raises(EpisodeFormatError, match="is not valid JSON"):
        read_episodes(broken)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="holds no episode files"):
        read_episodes(empty)
    with pytest.raises(FileNotFoundError):
        read_episodes(tmp_path / "missing")
    with pytest.raises(ValueError, match="appears in both"):
        read_episodes([dataset_dir, dataset_dir])


def test_mixed_topologies_are_rejected(tmp_path: Path) -> None:
    a = _with_final(make_episode("a_0000", OPS_A))
    b = _with_final(make_episode("b_0000", OPS_B))
    b["topology"] = "transformer"
    _write(tmp_path, a, b)
    with pytest.raises(ValueError, match="come from 2 action spaces"):
        load_transitions(tmp_path)


def test_a_non_finite_stored_reward_is_rejected_by_row(tmp_path: Path) -> None:
    episode = _with_final(make_episode(ops=OPS_A))
    episode["decisions"][2]["rewards"]["gap"]["total"] = float("inf")  # written as null
    episode["decisions"][2]["outcome"]["reward"] = float("inf")
    _write(tmp_path, episode)
    assert json.loads((tmp_path / "baseline_baseline_0000.json").read_text())["decisions"][2]["outcome"][
        "reward"] is None
    with pytest.raises(ValueError, match=r"rewards holds NaN or infinite values .* first in row 2"):
        load_transitions(tmp_path)
