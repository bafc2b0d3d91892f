"""Potential-based shaping is policy-invariant on recorded episodes, in every reward family.

Real synthetic episodes (tiny data) run through the real epoch loop under RandomPolicy and a randomly initialized
PPOPolicy, with a lowered lifecycle so seeds germinate, blend, reach probation and get culled within 8 epochs.
The loop scores them with the gap family (so every env trains beside its static twin); because rewards are pure
functions of records, every family can then re-score the same records. The potential, the shaping term and the
telescoping identity are recomputed from the records' snapshots alone.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

import pytest
import torch

from esper.data.tasks import DataCache, DataOptions, TaskSpec, get_task_spec
from esper.env import EnvStep, EpochData, Lockstep, run_epoch
from esper.env.env import EnvSpec, MorphoEnv
from esper.env.features import obs_dim
from esper.env.potential import LifecycleSnapshot, lifecycle_potential
from esper.env.rewards import ContributionRewardConfig, LossRewardConfig, RewardFamily, make_reward_fn
from esper.env.step_record import SUMMED_FIELDS, ShapedRewardComponents, StepRecord
from esper.kasmina.state import LifecycleConfig
from esper.leyline import LifecycleOp, SeedStage
from esper.simic.normalization import RunningMeanStd
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.controller import PPOPolicy
from esper.simic.ppo.ppo_config import PPOConfig
from esper.tamiyo import RandomPolicy, TamiyoPolicy

GAMMA = 0.9  # far from the default 0.995, so a shaping term that ignores the configured gamma is caught
MAX_EPOCHS = 8
SLOTS = ("early", "mid", "late")
PARAM_COST = 3.0
PBRS_WEIGHTS = {RewardFamily.GAP: 0.0, RewardFamily.CONTRIBUTION: ContributionRewardConfig().pbrs_weight,
                RewardFamily.LOSS: 0.1, RewardFamily.SPARSE: 0.0}  # loss: LossRewardConfig.stage_potential_weight
# Fast lifecycle: every stage is reachable within an 8-epoch episode.
FAST_LIFECYCLE = LifecycleConfig(min_training_epochs=1, min_probe_contribution=-100.0, min_seed_gradient_ratio=0.0,
                                 blending_steps=2, min_blending_epochs=1, max_probation_epochs=3)


@dataclass
class Recorded:
    """One env's episode: its steps (record, reward) and the env itself."""

    env: MorphoEnv
    steps: list[EnvStep] = field(default_factory=list)


def _task() -> TaskSpec:
    return dataclasses.replace(get_task_spec("synthetic"), lifecycle=FAST_LIFECYCLE)


def _ppo_policy(seed: int) -> PPOPolicy:
    torch.manual_seed(seed)
    space = get_task_spec("synthetic").action_space
    agent = PPOAgent(PPOConfig(hidden_dim=32), seed=seed, state_dim=obs_dim(space), space=space)
    return PPOPolicy(agent, RunningMeanStd(obs_dim(space)), use_telemetry=True)


@pytest.fixture(scope="module")
def episodes() -> list[Recorded]:
    """Two groups (one env seed and one static twin each): two random controllers, and a PPO controller."""
    task, device = _task(), torch.device("cpu")
    data = EpochData.build(task, DataCache(DataOptions()), [device], batch_size=128, seed=7,
                           max_train_samples=256, max_val_samples=128)
    groups: list[tuple[int, list[TamiyoPolicy]]] = [(11, [RandomPolicy(1), RandomPolicy(2)]), (44, [_ppo_policy(5)])]
    envs, controllers = [], []
    for env_seed, members in groups:
        twin = MorphoEnv(EnvSpec(task, SLOTS, MAX_EPOCHS, env_seed=env_seed, device=device, env_id=100 + env_seed),
                         "twin")
        for c in members:
            envs.append(MorphoEnv(EnvSpec(task, SLOTS, MAX_EPOCHS, env_seed=env_seed, device=device,
                                          env_id=len(envs)), c.name, twin=twin))
            controllers.append(c)
    recorded = {id(e): Recorded(e) for e in envs}
    lockstep = Lockstep(envs, data, make_reward_fn("gap", task, GAMMA, param_cost=PARAM_COST))
    for _ in range(MAX_EPOCHS):
        for step in run_epoch(lockstep, controllers):
            pending = tuple(lockstep._pending)[envs.index(step.env)]
            # the decision taken after the measured epoch saw exactly the measurement this record ends with
            assert (pending is None) == step.record.is_terminal
            if pending is not None:
                assert pending.before is step.record.after
            recorded[id(step.env)].steps.append(step)
    results = [env.result() for env in envs]
    for r, env in zip(results, envs, strict=True):
        # the episode reward accumulates exactly the per-step totals
        assert math.isclose(r.total_reward, sum(s.reward.total() for s in recorded[id(env)].steps),
                            rel_tol=1e-12, abs_tol=1e-12)
    return [recorded[id(e)] for e in envs]


def _phi(snapshot: LifecycleSnapshot) -> float:
    return lifecycle_potential(snapshot)


def _shaping(record: StepRecord) -> float:
    """γ·Φ(S') − Φ(S), with Φ = 0 for the terminal state."""
    return GAMMA * (0.0 if record.is_terminal else _phi(record.after.snapshot)) - _phi(record.before.snapshot)


def _rescore(family: RewardFamily, record: StepRecord) -> ShapedRewardComponents:
    return make_reward_fn(family, _task(), GAMMA, param_cost=PARAM_COST)(record)


def test_episodes_exercise_the_lifecycle(episodes: list[Recorded]) -> None:
    """The recorded episodes are not trivial: seeds germinate, blend, get culled, and the potential moves."""
    stages = {SeedStage(stage) for rec in episodes for s in rec.steps for _, stage, _ in s.record.after.snapshot
              if stage != 0}
    assert {SeedStage.TRAINING, SeedStage.BLENDING} <= stages
    ops = {s.decision.command.op for rec in episodes for s in rec.steps}
    assert {LifecycleOp.GERMINATE, LifecycleOp.CULL} <= ops
    for rec in episodes:
        assert any(_rescore(RewardFamily.CONTRIBUTION, s.record).pbrs != 0.0 for s in rec.steps)
    assert episodes[-1].env.controller_name == "ppo"
    # at least one episode ends with potential in flight, which the terminal decision must give back
    assert any(_phi(rec.steps[-1].record.before.snapshot) > 0 for rec in episodes)


def test_an_episode_has_one_transition_per_decision(episodes: list[Recorded]) -> None:
    for rec in episodes:
        records = [s.record for s in rec.steps]
        assert [s.epoch for s in rec.steps] == [r.epoch for r in records] == list(range(1, MAX_EPOCHS))
        assert [r.is_terminal for r in records] == [False] * (MAX_EPOCHS - 2) + [True]
        assert records[0].before.snapshot == tuple((slot, 0, 0) for slot in SLOTS)  # nothing before the first decision
        for before, after in itertools.pairwise(records):
            # consecutive transitions share the measurement between them (rollback steps included)
            assert after.before is before.after, f"measurement chain broken at epoch {after.epoch}"


@pytest.mark.parametrize("family", list(RewardFamily))
def test_shaping_telescopes_to_minus_the_first_potential(episodes: list[Recorded], family: RewardFamily) -> None:
    """Σ_e γ^(e−1)·F_e = −w·Φ(S_1): the potential in flight at the end is given back by the terminal decision."""
    weight = PBRS_WEIGHTS[family]
    for rec in episodes:
        records = [s.record for s in rec.steps]
        comps = [_rescore(family, r) for r in records]
        for comp, record in zip(comps, records, strict=True):
            assert comp.family == family.value
            assert comp.phi_prev == pytest.approx(_phi(record.before.snapshot), abs=1e-12)
            assert comp.phi_next == pytest.approx(0.0 if record.is_terminal else _phi(record.after.snapshot),
                                                  abs=1e-12)
            assert comp.pbrs == pytest.approx(weight * _shaping(record), rel=1e-12, abs=1e-12)
            assert comp.total() == pytest.approx(math.fsum(getattr(comp, f) for f in SUMMED_FIELDS), abs=1e-9)
            assert all(math.isfinite(getattr(comp, f)) for f in SUMMED_FIELDS)
        phi_1 = _phi(records[0].before.snapshot)
        raw = math.fsum(GAMMA ** (r.epoch - 1) * _shaping(r) for r in records)
        assert math.isclose(raw, -phi_1, rel_tol=1e-6, abs_tol=1e-6), raw
        logged = math.fsum(GAMMA ** (r.epoch - 1) * c.pbrs for r, c in zip(records, comps, strict=True))
        assert math.isclose(logged, -weight * phi_1, rel_tol=1e-6, abs_tol=1e-6), logged
        # without the terminal decision the sum would keep the final potential: γ^(T−2)·Φ(S_{T−1}) − Φ(S_1)
        partial = math.fsum(GAMMA ** (r.epoch - 1) * _shaping(r) for r in records[:-1])
        held = GAMMA ** (MAX_EPOCHS - 2) * _phi(records[-1].before.snapshot) - phi_1
        assert math.isclose(partial, held, rel_tol=1e-6, abs_tol=1e-6)


def test_records_pair_what_the_decision_saw_with_what_followed(episodes: list[Recorded]) -> None:
    """A germinated slot is empty when the decision is made and in TRAINING (G1 at once) one epoch later; a
    controller cull empties the slot for the next measured epoch."""
    seen = set()
    for rec in episodes:
        for step in rec.steps:
            cmd, record = step.decision.command, step.record
            if cmd.op not in (LifecycleOp.GERMINATE, LifecycleOp.CULL) or not step.action_success or record.rollback:
                continue
            assert cmd.slot_id is not None
            before = {s: (st, n) for s, st, n in record.before.snapshot}
            after = {s: (st, n) for s, st, n in record.after.snapshot}
            if cmd.op == LifecycleOp.GERMINATE:
                assert before[cmd.slot_id] == (0, 0) and after[cmd.slot_id] == (SeedStage.TRAINING, 1)
                assert record.before.slots[cmd.slot_id] is None and record.after.slots[cmd.slot_id] is not None
            else:
                assert before[cmd.slot_id] != (0, 0) and after[cmd.slot_id] == (0, 0)
            seen.add(cmd.op)
    assert seen == {LifecycleOp.GERMINATE, LifecycleOp.CULL}


def test_rewards_are_pure_functions_of_records(episodes: list[Recorded]) -> None:
    """Re-scoring a logged record reproduces its components exactly (the logged record suffices)."""
    for rec in episodes:
        for step in rec.steps:
            assert _rescore(RewardFamily.GAP, step.record).to_dict() == step.reward.to_dict()


def test_loss_family_rewards_loss_decreases(episodes: list[Recorded]) -> None:
    """loss_delta > 0 (an improvement) earns positive loss_primary; regressions cost half."""
    task = _task()
    config = LossRewardConfig.for_task(task.task_type, task.random_guess_loss, task.target_loss,
                                       task.typical_loss_delta_std)
    improved = 0
    for rec in episodes:
        for step in rec.steps:
            delta, primary = step.record.after.loss_delta, _rescore(RewardFamily.LOSS, step.record).loss_primary
            if step.record.rollback or not math.isfinite(delta):
                continue
            n = max(-config.max_loss_delta, min(config.max_loss_delta, delta / config.typical_loss_delta_std))
            expected = config.loss_delta_weight * (n if n >= 0 else config.regression_penalty_scale * n)
            assert primary == pytest.approx(expected, rel=1e-9, abs=1e-12)
            if delta > 0:
                assert primary > 0
                improved += 1
            elif delta < 0:
                assert primary < 0
    assert improved > 0, "no improving step was recorded: the loss-family check would be vacuous"
