"""Real datagen episodes on `synthetic` (tiny caps, few epochs): schema, credit, the shared twin, the loader."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from esper.data.tasks import get_task_spec
from esper.datagen.generate import GenerateOptions, datagen_task, episode_setup, generate_episode, generate_twin
from esper.datagen.loader import load_transitions
from esper.datagen.plans import EpisodeTask, GenerationPlan
from esper.datagen.schema import SCHEMA_VERSION, validate_episode, write_strict_json
from esper.env import MorphoEnv, StoredTwin, run_episodes
from esper.env.charges import measured_cost
from esper.env.features import obs_dim
from esper.env.rewards import INTERVENTION_COSTS, RewardFamily
from esper.leyline import LifecycleOp
from esper.leyline.constants import DEFAULT_GAMMA, DEFAULT_GOVERNOR_DEATH_PENALTY

CNN = get_task_spec("synthetic").action_space
NUM_JOINT_ACTIONS, OBS_DIM = CNN.num_joint_actions, obs_dim(CNN)  # 43 and 80 with the built-in blueprints

OPTIONS = GenerateOptions.for_task("synthetic", max_epochs=5, max_train_samples=96, max_val_samples=64)
# Uniformly random over valid actions: germinates, culls, and exercises every reward term within five epochs.
PLAN = GenerationPlan("baseline", "random", 1.0, 0)


def _twin(result: dict[str, Any]) -> StoredTwin:
    return PLAN.twin.curves(result)


@pytest.fixture(scope="module")
def twin_result() -> dict[str, Any]:
    return generate_twin(PLAN.twin, OPTIONS, "cpu")


@pytest.fixture(scope="module")
def episode(twin_result: dict[str, Any]) -> dict[str, Any]:
    return generate_episode(EpisodeTask(PLAN, _twin(twin_result)), OPTIONS, "cpu")


def test_the_episode_is_a_valid_episode_of_the_schema(episode: dict[str, Any]) -> None:
    assert validate_episode(episode) == []
    assert episode["schema_version"] == SCHEMA_VERSION
    assert episode["episode_length"] == OPTIONS.max_epochs - 1  # decisions after epochs 1 … T−1
    assert [d["observation"]["epoch"] for d in episode["decisions"]] == list(range(1, OPTIONS.max_epochs))
    assert episode["environment"]["max_epochs"] == episode["max_epochs"] == OPTIONS.max_epochs
    assert {k: episode[k] for k in OPTIONS.settings()} == OPTIONS.settings()
    assert episode["model_name"] == "HostCNN" and episode["behavior_policy"]["policy_id"] == "random-eps1.0"
    assert len(episode["final_features"]) == OBS_DIM
    for d in episode["decisions"]:
        mask = d["valid_joint_actions"]
        assert len(mask) == NUM_JOINT_ACTIONS and mask[d["action"]["joint_index"]]
        assert d["outcome"]["reward"] == d["rewards"]["gap"]["total"]
        assert math.isclose(math.exp(d["action"]["joint_behavior_logp"]), d["action"]["joint_behavior_prob"])


def test_every_reward_family_is_recorded_and_gap_is_stored(episode: dict[str, Any]) -> None:
    assert (episode["reward_family"], episode["reward_gamma"]) == ("gap", DEFAULT_GAMMA)
    for d in episode["decisions"]:
        assert list(d["rewards"]) == [f.value for f in RewardFamily]
        assert all(components["family"] == family for family, components in d["rewards"].items())
    sparse = [d["rewards"]["sparse"]["sparse_terminal"] for d in episode["decisions"]]
    assert sparse[:-1] == [0.0] * (len(sparse) - 1) and sparse[-1] > 0  # the sparse family pays at the end only


def test_the_random_policy_intervened(episode: dict[str, Any]) -> None:
    """Keeps the credit test below honest: the episode germinated, so parameter and action costs are not all 0."""
    assert episode["total_seeds_created"] >= 1 and episode["num_interventions"] >= 1


def test_stored_gap_rewards_sum_to_the_final_gap_minus_parameter_and_action_costs(episode: dict[str, Any]) -> None:
    """Σ r = g_T − λ_p·p_T − Σc (− the governor penalty per rollback): the telescoping the gap reward promises."""
    decisions = episode["decisions"]
    twin_final = episode["twin"]["val_accuracy_curve"][-1]
    g_final = episode["final_accuracy"] - twin_final
    costs = sum(-INTERVENTION_COSTS[LifecycleOp[d["action"]["action"]]] for d in decisions)
    rollbacks = sum(1 for d in decisions if d["outcome"]["rollback"])
    expected = (g_final - OPTIONS.param_cost * episode["final_param_ratio"] - costs
                - DEFAULT_GOVERNOR_DEATH_PENALTY * rollbacks)
    stored = [d["rewards"]["gap"]["total"] for d in decisions]
    assert math.isclose(math.fsum(stored), expected, abs_tol=1e-9)
    assert math.isclose(episode["total_return"], expected, abs_tol=1e-9)
    assert decisions[0]["outcome"]["return_to_go"] == pytest.approx(expected, abs=1e-9)
    assert decisions[-1]["outcome"]["return_to_go"] == pytest.approx(stored[-1], abs=1e-12)


def test_each_next_state_is_the_following_decisions_state(episode: dict[str, Any]) -> None:
    decisions = episode["decisions"]
    for t in range(len(decisions) - 1):
        assert decisions[t + 1]["observation"]["epoch"] == decisions[t]["observation"]["epoch"] + 1
    assert episode["decisions"][-1]["step_metadata"]["done"]
    assert not any(d["step_metadata"]["done"] for d in decisions[:-1])


def test_the_stored_twin_is_the_live_twin_bit_for_bit(twin_result: dict[str, Any],
                                                      episode: dict[str, Any]) -> None:
    """The episode re-run with a live twin trained beside it (as training does): the live twin's curves equal the
    precomputed twin's, and the episode's stored rewards equal the ones the live twin gives."""
    setup = episode_setup(PLAN.env_config_id, PLAN.seed, OPTIONS, "cpu", episode=PLAN.episode_idx)
    live = MorphoEnv(dataclasses.replace(setup.spec, env_id=1), "twin")
    env = MorphoEnv(setup.spec, "random", twin=live)
    recorder = setup.recorder(env)
    run_episodes([env], [PLAN.create_policy(setup.task.action_space)], setup.data, setup.reward_fn,
                 on_step=recorder.record)
    assert live.accuracy_curve == twin_result["val_accuracy_curve"]
    assert live.loss_curve == twin_result["val_loss_curve"]
    rewards = [d["rewards"] for d in recorder.decisions()]
    assert rewards == [d["rewards"] for d in episode["decisions"]]
    assert recorder.summary()["final_features"] == episode["final_features"]


def test_the_loader_round_trips_a_real_episode(tmp_path: Path, episode: dict[str, Any]) -> None:
    write_strict_json(tmp_path / f"{episode['episode_id']}.json", episode)
    data = load_transitions(tmp_path)
    decisions = episode["decisions"]
    assert len(data) == len(decisions) and data.num_episodes == 1
    assert data.rewards.tolist() == pytest.approx([d["outcome"]["reward"] for d in decisions])
    assert data.actions.tolist() == [d["action"]["joint_index"] for d in decisions]
    assert torch.equal(data.next_states[-1], torch.tensor(episode["final_features"], dtype=torch.float32))
    assert data.behavior_policies == {0: "random-eps1.0"}
    assert data.episode_names == {0: PLAN.episode_id}


def test_the_task_variant_takes_host_optimizers_and_batch_from_the_preset() -> None:
    adam = GenerationPlan("adam", "baseline", 0.0, 0).get_env_config()
    task = datagen_task(get_task_spec("synthetic"), adam)
    assert (task.host_optimizer.name, task.host_optimizer.lr) == ("adam", 0.001)
    assert task.seed_optimizer == task.host_optimizer
    assert task.default_batch_size == adam.batch_size
    wide = datagen_task(get_task_spec("synthetic"), GenerationPlan("wide", "baseline", 0.0, 0).get_env_config())
    assert sum(p.numel() for p in wide.host_factory().parameters()) > sum(
        p.numel() for p in task.host_factory().parameters())
    with pytest.raises(ValueError, match="fixed widths"):
        task.host_factory(1.5)


def test_options_need_a_parameter_cost_where_the_task_has_none() -> None:
    with pytest.raises(ValueError, match="no parameter cost for the gap reward"):
        GenerateOptions.for_task("cifar10")
    assert GenerateOptions.for_task("cifar10", 0.5).param_cost == 0.5
    assert GenerateOptions.for_task("synthetic").param_cost == measured_cost("param", "synthetic", None)
    capped = GenerateOptions.for_task("synthetic", max_train_samples=192)
    assert capped.param_cost == measured_cost("param", "synthetic", 192) != measured_cost("param", "synthetic", None)
    with pytest.raises(ValueError, match="'tinystories' is a transformer lm task: choose an image-classification task"):
        GenerateOptions.for_task("tinystories", 1.0)
    with pytest.raises(ValueError, match="Unknown task 'nope'"):
        GenerateOptions.for_task("nope", 1.0)
