"""PBRS telescopes on recorded episodes (DESIGN §6.9 "Potential", §11.3 item 4, §12.4 #30 and #32).

Real synthetic episodes (tiny data) run under RandomPolicy (two seeds) and a randomly initialized PPOController,
with a lowered lifecycle so seeds germinate, blend, reach probation and get culled within 8 epochs. Every step's
`StepRecord` and reward are collected through `run_episodes(on_step=...)`; the potential, the shaping term and the
telescoping identity are then recomputed from the records' snapshots alone.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch

from esper.env.env import EnvSpec, EnvStep, MorphoEnv
from esper.env.features import obs_dim
from esper.env.loop import EpochData, run_episodes
from esper.env.potential import LifecycleSnapshot, lifecycle_potential
from esper.env.rewards import ContributionRewardConfig, LossRewardConfig, make_reward_fn
from esper.env.step_record import SUMMED_FIELDS, ShapedRewardComponents, StepRecord
from esper.kasmina.state import LifecycleConfig
from esper.leyline import LifecycleOp, SeedStage
from esper.runtime.tasks import DataCache, DataOptions, TaskSpec, get_task_spec
from esper.simic.normalization import RunningMeanStd
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.controller import PPOController
from esper.tamiyo import RandomPolicy, TamiyoPolicy

GAMMA = 0.9  # far from the default 0.995, so a shaping term that ignores the configured gamma is caught
MAX_EPOCHS = 8
SLOTS = ("early", "mid", "late")
CONTRIBUTION_PBRS_WEIGHT = ContributionRewardConfig().pbrs_weight
LOSS_PBRS_WEIGHT = 0.1  # LossRewardConfig.stage_potential_weight (§6.9)
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


def _ppo_controller(seed: int) -> PPOController:
    torch.manual_seed(seed)
    agent = PPOAgent(TrainingConfig(hidden_dim=32, seed=seed), state_dim=obs_dim(True), topology="cnn")
    return PPOController(agent, RunningMeanStd(obs_dim(True)), use_telemetry=True)


def _record(family: str, controllers: list[TamiyoPolicy], env_seeds: list[int], data_seed: int
            ) -> list[Recorded]:
    task, device = _task(), torch.device("cpu")
    data = EpochData.build(task, DataCache(DataOptions()), [device], batch_size=128, seed=data_seed,
                           max_train_samples=256, max_val_samples=128)
    envs = [MorphoEnv(EnvSpec(task, SLOTS, MAX_EPOCHS, env_seed=s, device=device, env_id=i), c.name)
            for i, (c, s) in enumerate(zip(controllers, env_seeds, strict=True))]
    for c, s in zip(controllers, env_seeds, strict=True):
        c.reset(s)
    recorded = {id(e): Recorded(e) for e in envs}

    def on_step(steps: list[EnvStep]) -> None:
        for step in steps:
            # the record's S_e is the true lifecycle right after step_epoch
            assert step.record.next_snapshot == step.env.model.lifecycle_snapshot()
            recorded[id(step.env)].steps.append(step)

    reward_fn = make_reward_fn(family, task, GAMMA)
    results = run_episodes(envs, controllers, data, reward_fn, on_step=on_step)
    for r, env in zip(results, envs, strict=True):
        # the episode reward accumulates exactly the per-step totals
        assert math.isclose(r.total_reward, sum(s.reward.total() for s in recorded[id(env)].steps),
                            rel_tol=1e-12, abs_tol=1e-12)
    return [recorded[id(e)] for e in envs]


@pytest.fixture(scope="module")
def contribution_episodes() -> list[Recorded]:
    controllers: list[TamiyoPolicy] = [RandomPolicy(), RandomPolicy(), _ppo_controller(5)]
    return _record("contribution", controllers, [11, 22, 44], data_seed=7)


@pytest.fixture(scope="module")
def loss_episodes() -> list[Recorded]:
    return _record("loss", [RandomPolicy(), RandomPolicy()], [101, 202], data_seed=8)


def _phi(snapshot: LifecycleSnapshot) -> float:
    return lifecycle_potential(snapshot)


def _shaping(record: StepRecord) -> float:
    return GAMMA * _phi(record.next_snapshot) - _phi(record.prev_snapshot)


def _check_episode(rec: Recorded, weight: float) -> None:
    steps = rec.steps
    assert [s.epoch for s in steps] == list(range(1, MAX_EPOCHS + 1))
    records = [s.record for s in steps]
    assert [r.is_terminal for r in records] == [False] * (MAX_EPOCHS - 1) + [True]

    # S_0: every enabled slot empty, potential 0
    assert records[0].prev_snapshot == tuple((slot, 0, 0) for slot in SLOTS)
    assert _phi(records[0].prev_snapshot) == 0.0
    # chain: S_e is reused unchanged as the previous state of step e + 1 (rollback steps included)
    for before, after in itertools.pairwise(records):
        assert after.prev_snapshot == before.next_snapshot, f"snapshot chain broken at epoch {after.epoch}"

    for step in steps:
        comp, record = step.reward, step.record
        assert comp.phi_prev == pytest.approx(_phi(record.prev_snapshot), abs=1e-12)
        assert comp.phi_next == pytest.approx(_phi(record.next_snapshot), abs=1e-12)
        assert comp.pbrs == pytest.approx(weight * _shaping(record), rel=1e-12, abs=1e-12)
        assert comp.total() == pytest.approx(math.fsum(getattr(comp, f) for f in SUMMED_FIELDS), abs=1e-9)
        for f in SUMMED_FIELDS:
            assert math.isfinite(getattr(comp, f)), f

    # Σ_e γ^(e−1)·(γΦ(S_e) − Φ(S_{e−1})) = γ^T·Φ(S_T) − Φ(S_0)
    lhs = math.fsum(GAMMA ** (r.epoch - 1) * _shaping(r) for r in records)
    rhs = GAMMA ** MAX_EPOCHS * _phi(records[-1].next_snapshot) - _phi(records[0].prev_snapshot)
    assert math.isclose(lhs, rhs, rel_tol=1e-6, abs_tol=1e-9), (lhs, rhs)
    # the same identity from the logged shaping components
    logged = math.fsum(GAMMA ** (s.epoch - 1) * s.reward.pbrs / weight for s in steps)
    assert math.isclose(logged, rhs, rel_tol=1e-6, abs_tol=1e-9), (logged, rhs)


def _stages_seen(episodes: list[Recorded]) -> set[SeedStage]:
    return {SeedStage(stage) for rec in episodes for s in rec.steps for _, stage, _ in s.record.next_snapshot
            if stage != 0}


def test_episodes_exercise_the_lifecycle(contribution_episodes: list[Recorded]) -> None:
    """The recorded episodes are not trivial: seeds germinate, blend, get culled, and the potential moves."""
    assert {SeedStage.TRAINING, SeedStage.BLENDING} <= _stages_seen(contribution_episodes)
    ops = {s.decision.command.op for rec in contribution_episodes for s in rec.steps}
    assert {LifecycleOp.GERMINATE, LifecycleOp.CULL} <= ops
    for rec in contribution_episodes:
        assert any(s.reward.pbrs != 0.0 for s in rec.steps)
    assert contribution_episodes[-1].env.controller_name == "ppo"


def test_pbrs_telescopes_on_recorded_contribution_episodes(contribution_episodes: list[Recorded]) -> None:
    for rec in contribution_episodes:
        _check_episode(rec, CONTRIBUTION_PBRS_WEIGHT)


def test_pbrs_uses_pre_action_and_post_step_lifecycle(contribution_episodes: list[Recorded]) -> None:
    """A germinated slot is empty in S_{e−1} and in TRAINING (G1 same epoch) in S_e; a controller cull empties it."""
    seen = set()
    for rec in contribution_episodes:
        for step in rec.steps:
            cmd, record = step.decision.command, step.record
            if cmd.op not in (LifecycleOp.GERMINATE, LifecycleOp.CULL) or not step.action_success:
                continue
            prev, nxt = dict((s, st) for s, st, _ in record.prev_snapshot), dict(
                (s, (st, n)) for s, st, n in record.next_snapshot)
            assert cmd.slot_id is not None
            if cmd.op == LifecycleOp.GERMINATE:
                assert prev[cmd.slot_id] == 0 and nxt[cmd.slot_id] == (SeedStage.TRAINING, 0)
            else:
                assert prev[cmd.slot_id] != 0 and nxt[cmd.slot_id] == (0, 0)
            seen.add(cmd.op)
    assert seen == {LifecycleOp.GERMINATE, LifecycleOp.CULL}


def test_rewards_are_pure_functions_of_records(contribution_episodes: list[Recorded]) -> None:
    """Re-scoring a logged record reproduces its components exactly (the logged record suffices, §6.9)."""
    reward_fn: Callable[[StepRecord], ShapedRewardComponents] = make_reward_fn("contribution", _task(), GAMMA)
    for rec in contribution_episodes:
        for step in rec.steps:
            assert reward_fn(step.record).to_dict() == step.reward.to_dict()


def test_pbrs_telescopes_on_recorded_loss_episodes(loss_episodes: list[Recorded]) -> None:
    for rec in loss_episodes:
        assert all(s.reward.family == "loss" for s in rec.steps)
        _check_episode(rec, LOSS_PBRS_WEIGHT)


def test_loss_family_rewards_loss_decreases(loss_episodes: list[Recorded]) -> None:
    """loss_delta > 0 (an improvement) earns positive loss_primary; regressions cost half; epoch 1 earns nothing."""
    task = _task()
    config = LossRewardConfig.for_task(task.task_type, task.random_guess_loss, task.target_loss,
                                       task.typical_loss_delta_std)
    improved = 0
    for rec in loss_episodes:
        assert rec.steps[0].record.loss_delta == 0.0 and rec.steps[0].reward.loss_primary == 0.0
        for step in rec.steps:
            delta, primary = step.record.loss_delta, step.reward.loss_primary
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
