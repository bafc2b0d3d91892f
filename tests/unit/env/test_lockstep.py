"""`Lockstep`, the epoch protocol: its order is enforced, a refused call changes nothing, and an episode driven through
it by hand is the episode every runner (`run_episodes`, the env pool's hosts) runs, row for row."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env import EnvSpec, EpochData, EpochOrderError, Lockstep, MorphoEnv, run_episodes
from esper.env.driver import EnvPool
from esper.env.groups import EpisodeRecipe, GroupPlan, MemberPlan, StepOutcome
from esper.env.logs import EpisodeResult
from esper.env.rewards import ContributionRewardConfig, compute_reward
from esper.env.setting import EpisodeSetting
from esper.env.step_record import StepRecord
from esper.execution.workers import WorkerOptions
from esper.leyline import EnvObservation
from esper.tamiyo import InvalidDecisionError, RandomPolicy, StaticPolicy, TamiyoDecision

TASK = get_task_spec("synthetic")
SLOTS = ("early", "mid", "late")
MAX_EPOCHS = 3
SEED, DATA_SEED, POLICY_SEED = 5, 7, 0
REWARD, GAMMA = ContributionRewardConfig(), 0.99
SETTING = EpisodeRecipe(EpisodeSetting(task="synthetic", slots=SLOTS, max_epochs=MAX_EPOCHS, batch_size=32,
                                       max_train_samples=32, max_val_samples=16), REWARD, GAMMA)


def _reward(record: StepRecord) -> Any:
    return compute_reward(record, REWARD, GAMMA)


def _envs(n: int) -> list[MorphoEnv]:
    return [MorphoEnv(EnvSpec(TASK, SLOTS, MAX_EPOCHS, SEED, torch.device("cpu"), env_id=i), f"c{i}")
            for i in range(n)]


def _data() -> EpochData:
    return EpochData.build(TASK, DataCache(DataOptions()), [torch.device("cpu")], batch_size=SETTING.setting.batch_size,
                           seed=DATA_SEED, max_train_samples=SETTING.setting.max_train_samples,
                           max_val_samples=SETTING.setting.max_val_samples)


def _wait(obs: EnvObservation) -> TamiyoDecision:
    return StaticPolicy().decide(obs)


def _invalid(obs: EnvObservation) -> TamiyoDecision:
    index = int(np.flatnonzero(~np.array(obs.validity.joint_mask()))[0])
    factored = obs.action_space.from_joint_index(index)
    return TamiyoDecision(factored.to_command(obs.action_space), factored, reason="invalid on purpose", confidence=1.0)


def _clock_free(results: list[EpisodeResult]) -> list[EpisodeResult]:
    return [dataclasses.replace(r, wall_seconds=0.0) for r in results]


def test_envs_of_one_lockstep_share_their_episode_length() -> None:
    short = MorphoEnv(EnvSpec(TASK, SLOTS, MAX_EPOCHS - 1, SEED, torch.device("cpu")), "short")
    with pytest.raises(ValueError, match="must share max_epochs"):
        Lockstep([*_envs(1), short], _data(), _reward)
    with pytest.raises(ValueError, match="must share max_epochs"):
        Lockstep([], _data(), _reward)


def test_measure_and_apply_alternate_and_a_refused_call_changes_nothing() -> None:
    lockstep = Lockstep(_envs(2), _data(), _reward)
    with pytest.raises(EpochOrderError, match=r"Epoch 1 is not measured yet: measure\(\) before apply\(\)"):
        lockstep.apply([])
    for epoch in range(1, MAX_EPOCHS):
        measured = lockstep.measure()
        assert measured.epoch == epoch and not measured.last
        assert [o.epoch for o in measured.observations] == [epoch, epoch]
        assert len(measured.steps) == (0 if epoch == 1 else 2)  # the decisions after the previous epoch, credited
        with pytest.raises(EpochOrderError, match=rf"apply\(\) before measuring epoch {epoch + 1}"):
            lockstep.measure()
        waits = [_wait(o) for o in measured.observations]
        with pytest.raises(ValueError, match="1 decisions for 2 envs"):
            lockstep.apply(waits[:1])
        with pytest.raises(ValueError, match="every epoch but the last"):
            lockstep.apply(None)
        with pytest.raises(InvalidDecisionError):  # env 0's decision is valid, env 1's is not: neither executes
            lockstep.apply([waits[0], _invalid(measured.observations[1])])
        assert all(sum(env.action_counts.values()) == epoch - 1 for env in lockstep.envs)
        assert tuple(lockstep._pending) == (None, None)  # measuring credited the previous decisions
        lockstep.apply(waits)
        assert [p.decision if p is not None else None for p in tuple(lockstep._pending)] == waits
        with pytest.raises(EpochOrderError, match=rf"Epoch {epoch + 1} is not measured yet"):
            lockstep.apply(waits)
    final = lockstep.measure()
    assert final.epoch == MAX_EPOCHS and final.last and len(final.steps) == 2
    assert all(s.record.is_terminal for s in final.steps)
    with pytest.raises(ValueError, match="every epoch but the last"):
        lockstep.apply([_wait(o) for o in final.observations])
    lockstep.apply(None)
    assert tuple(lockstep._pending) == (None, None)
    with pytest.raises(EpochOrderError, match=f"ended with epoch {MAX_EPOCHS}: there is no epoch to measure"):
        lockstep.measure()
    with pytest.raises(EpochOrderError, match=f"ended with epoch {MAX_EPOCHS}: there is nothing to apply"):
        lockstep.apply(None)


def test_an_episode_through_the_lockstep_is_the_episode_the_runners_run() -> None:
    """By hand (measure, decide, apply), through `run_episodes` and through an env pool's host: the same steps.jsonl
    rows and the same episode results."""
    lockstep = Lockstep(_envs(1), _data(), _reward)
    policy = RandomPolicy(POLICY_SEED)
    rows: list[dict[str, Any]] = []
    for _ in range(MAX_EPOCHS):
        measured = lockstep.measure()
        rows += [s.row().to_dict() for s in measured.steps]
        lockstep.apply(None if measured.last else [policy.decide(o) for o in measured.observations])
    by_hand = _clock_free([env.result() for env in lockstep.envs])
    assert len(rows) == MAX_EPOCHS - 1 and {r["op"] for r in rows} != {"WAIT"}  # the episode did something

    looped: list[dict[str, Any]] = []
    results = run_episodes(_envs(1), [RandomPolicy(POLICY_SEED)], _data(), _reward,
                           on_step=lambda steps: looped.extend(s.row().to_dict() for s in steps))
    assert looped == rows and _clock_free(results) == by_hand

    pooled: list[dict[str, Any]] = []

    def record(steps: list[tuple[StepOutcome, TamiyoDecision]]) -> None:
        pooled.extend(outcome.row for outcome, _ in steps)

    group = GroupPlan(seed=SEED, data_seed=DATA_SEED, members=(MemberPlan(0, "c0", "cpu"),))
    with EnvPool(WorkerOptions(), DataCache(DataOptions())) as pool:
        run = pool.run(SETTING, [group], [RandomPolicy(POLICY_SEED)], on_steps=record)
    assert run is not None
    assert pooled == rows and _clock_free(run.results) == by_hand
