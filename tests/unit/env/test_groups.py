"""Env groups on hosts: envs come back in the order their groups were given (whatever data seeds they share), one
controller decision per env reaches its env, a group may bring a setting of its own, and a host run in place gives
the numbers the epoch loop gives."""

from __future__ import annotations

import dataclasses

import pytest

from esper.data.families import Family, InstanceType, family_task, register_family
from esper.data.tasks import DataCache, DataOptions
from esper.env.driver import EnvPool
from esper.env.groups import EpisodeRecipe, GroupPlan, MemberPlan
from esper.env.lockstep import EpochOrderError
from esper.env.rewards import ContributionRewardConfig
from esper.env.setting import EpisodeSetting
from esper.execution.workers import WorkerOptions
from esper.tamiyo import RandomPolicy, StaticPolicy

FAMILY = register_family(Family("groups-probe", 1, "synthetic", (
    InstanceType("plain", "synthetic", 32), InstanceType("narrow", "synthetic", 48, width=0.5),
    InstanceType("held", "synthetic", 32, corruption=("fog", 1)),
), held_out=("held",)))
SETTING = EpisodeRecipe(EpisodeSetting(task="synthetic", max_epochs=3, batch_size=32, max_train_samples=32,
                                       max_val_samples=16), ContributionRewardConfig(), 0.99)


def _group(env_id: int, data_seed: int) -> GroupPlan:
    return GroupPlan(seed=100 + env_id, data_seed=data_seed, members=(MemberPlan(env_id, f"c{env_id}", "cpu"),))


def test_envs_keep_their_group_order_and_their_own_decisions() -> None:
    """Groups of data seeds 1, 2, 1: results in that order; each env's steps carry its own controller's ops."""
    groups = [_group(0, 1), _group(1, 2), _group(2, 1)]
    controllers = [StaticPolicy(), RandomPolicy(seed=3), StaticPolicy()]
    ops: dict[int, set[str]] = {}

    def record(steps: list) -> None:  # type: ignore[type-arg]
        for step, decision in steps:
            assert step.row["controller"] == f"c{step.env_id}" and step.position == step.env_id
            ops.setdefault(step.env_id, set()).add(decision.command.op.name)

    with EnvPool(WorkerOptions(), DataCache(DataOptions())) as pool:
        run = pool.run(SETTING, groups, controllers, on_steps=record)
    assert run is not None
    assert [r.env_id for r in run.results] == [0, 1, 2] and [r.controller for r in run.results] == ["c0", "c1", "c2"]
    assert ops[0] == ops[2] == {"WAIT"}  # the static controllers' envs got WAITs, not the random one's actions
    assert run.results[0].env_seed == 100 and run.results[2].env_seed == 102


def test_the_caller_decides_between_the_epochs_the_pool_yields() -> None:
    """`epochs` yields every epoch with the transitions it completed; the caller applies each epoch's decisions
    before the next, and collects the results after the last."""
    groups = [_group(0, 1), _group(1, 1)]
    policy = StaticPolicy()
    with EnvPool(WorkerOptions(), DataCache(DataOptions())) as pool:
        with pytest.raises(EpochOrderError, match="apply"):
            pool.apply([])
        seen = []
        for m in pool.epochs(SETTING, groups):
            seen.append((m.epoch, m.decision_step, m.credited_step, m.last, len(m.observations),
                         [s.position for s in m.steps]))
            if not m.last:
                with pytest.raises(ValueError, match="1 decisions for 2 envs"):
                    pool.apply([policy.decide(m.observations[0])])
                pool.apply([policy.decide(o) for o in m.observations])
        results = pool.finish().results
        assert seen == [(1, 0, -1, False, 2, []), (2, 1, 0, False, 2, [0, 1]), (3, 2, 1, True, 2, [0, 1])]
        assert [r.env_id for r in results] == [0, 1]

        epochs = pool.epochs(SETTING, groups)
        next(epochs)
        with pytest.raises(EpochOrderError, match="apply"):
            next(epochs)  # epoch 2 measured before epoch 1's decisions
        with pytest.raises(EpochOrderError, match="finish"):
            pool.finish()  # the episodes never ended


def test_a_group_with_its_own_setting_trains_in_it_beside_the_calls() -> None:
    """A family's groups each bring their type's setting (task, sample cap, reward): here a width-0.5 host on 48
    samples beside the call's synthetic host on 32; an episode length other than the call's is refused."""
    narrow = dataclasses.replace(SETTING, setting=SETTING.setting.with_overrides(
        task=family_task(FAMILY, FAMILY.type("narrow")), max_train_samples=48))
    groups = [_group(0, 1), dataclasses.replace(_group(1, 2), recipe=narrow)]
    with EnvPool(WorkerOptions(), DataCache(DataOptions())) as pool:
        run = pool.run(SETTING, groups, [StaticPolicy(), StaticPolicy()])
        assert run.results[1].host_params < run.results[0].host_params  # the narrow type's host
        assert run.batch_loads > 0
        longer = dataclasses.replace(groups[1], recipe=dataclasses.replace(
            narrow, setting=narrow.setting.with_overrides(max_epochs=4)))
        with pytest.raises(ValueError, match="last 4 epochs, the call's 3"):
            pool.run(SETTING, [groups[0], longer], [StaticPolicy(), StaticPolicy()])
