"""Stored twins: an env reads its twin's measurements from curves computed earlier, exactly as from a live twin."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import EnvSpec, EnvStep, EpochData, MorphoEnv, StoredTwin, run_episodes
from esper.env.lockstep import twins_of
from esper.env.rewards import StepRecord, make_reward_fn
from esper.tamiyo import RandomPolicy

SLOTS = ("early", "mid", "late")
MAX_EPOCHS = 4
SEED = 3


def _spec(env_id: int, seed: int = SEED, max_epochs: int = MAX_EPOCHS) -> EnvSpec:
    return EnvSpec(get_task_spec("synthetic"), SLOTS, max_epochs, env_seed=seed, device=torch.device("cpu"),
                   env_id=env_id)


def _data() -> EpochData:
    return EpochData.build(get_task_spec("synthetic"), DataCache(DataOptions()), [torch.device("cpu")],
                           batch_size=64, seed=9, max_train_samples=128, max_val_samples=64)


def test_stored_twin_curves_must_match_in_length() -> None:
    with pytest.raises(ValueError, match="equal-length, non-empty"):
        StoredTwin(SEED, (1.0, 2.0), (1.0,))
    with pytest.raises(ValueError, match="equal-length, non-empty"):
        StoredTwin(SEED, (), ())


@pytest.mark.parametrize(("seed", "epochs"), [(SEED + 1, MAX_EPOCHS), (SEED, MAX_EPOCHS + 1)])
def test_an_env_refuses_a_stored_twin_of_another_seed_or_length(seed: int, epochs: int) -> None:
    twin = StoredTwin(seed, (10.0,) * epochs, (2.0,) * epochs)
    with pytest.raises(ValueError, match="share its envs' seed and episode length"):
        MorphoEnv(_spec(0), "x", twin=twin)


def test_the_loop_trains_live_twins_only() -> None:
    live = MorphoEnv(_spec(9), "twin")
    stored = StoredTwin(SEED, (10.0,) * MAX_EPOCHS, (2.0,) * MAX_EPOCHS)
    envs = [MorphoEnv(_spec(0), "a", twin=live), MorphoEnv(_spec(1), "b", twin=stored)]
    assert twins_of(envs) == [live]


def _without_twin_flops(record: StepRecord) -> StepRecord:
    return dataclasses.replace(record, before=dataclasses.replace(record.before, twin_train_flops=None),
                               after=dataclasses.replace(record.after, twin_train_flops=None))


def test_a_stored_twin_gives_the_rewards_of_the_live_twin_it_stores() -> None:
    """Run an env beside a live twin, then the same env again against the twin's stored curves: every measurement,
    reward and the final observation agree bit for bit."""
    reward_fn = make_reward_fn("gap", get_task_spec("synthetic"), 1.0, param_cost=1.5)

    def episode(twin: MorphoEnv | StoredTwin) -> tuple[MorphoEnv, list[EnvStep]]:
        env = MorphoEnv(_spec(0), "random", twin=twin)
        steps: list[EnvStep] = []
        run_episodes([env], [RandomPolicy(4)], _data(), reward_fn, on_step=steps.extend)
        return env, steps

    live = MorphoEnv(_spec(9), "twin")
    env_live, steps_live = episode(live)
    stored = StoredTwin(SEED, tuple(live.accuracy_curve), tuple(live.loss_curve))
    env_stored, steps_stored = episode(stored)
    assert len(steps_live) == MAX_EPOCHS - 1
    assert [_without_twin_flops(s.record) for s in steps_live] == [s.record for s in steps_stored]
    assert all(s.record.after.twin_train_flops is None for s in steps_stored)  # a stored twin's curves carry none
    assert [s.reward.to_dict() for s in steps_live] == [s.reward.to_dict() for s in steps_stored]
    assert steps_live[-1].record.after.twin_val_accuracy == live.accuracy_curve[-1]
    # every field but the wall-clock time, which no two runs share
    assert dataclasses.replace(env_live.result(), wall_seconds=0.0) == dataclasses.replace(env_stored.result(),
                                                                                          wall_seconds=0.0)
    assert env_stored.last_observation is not None and env_stored.last_observation.epoch == MAX_EPOCHS
