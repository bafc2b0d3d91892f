"""Credit timing and the static twin on real (tiny) runs through the real epoch loop.

One group of envs shares an env seed and one static twin: scripted controllers whose seeds never blend (culled
before blending, or germinated at the last decision), a scripted controller whose seed blends, and a random
controller. A lowered lifecycle makes a seed blend two epochs after it is germinated. It runs on `synthetic`
(classification, CNN) and on `synthetic_text` with a small transformer host that uses dropout, so the host draws
random numbers while it trains and the twin's bit-identity also covers the envs' random streams.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import pytest
import torch

from esper.data.readers import VOCAB_SIZE
from esper.data.tasks import DataCache, DataOptions, TaskSpec, get_task_spec
from esper.env import EnvStep, EpochData, run_episodes
from esper.env.env import EnvSpec, MorphoEnv
from esper.env.logs import EpisodeResult, StepRow
from esper.env.rewards import INTERVENTION_COSTS, GapRewardConfig, compute_reward, make_reward_fn
from esper.kasmina.hosts import TransformerHost
from esper.kasmina.state import LifecycleConfig
from esper.leyline import EnvObservation, LifecycleCommand, LifecycleOp, SeedStage
from esper.leyline.constants import DEFAULT_GOVERNOR_DEATH_PENALTY
from esper.tamiyo import RandomPolicy, TamiyoDecision, TamiyoPolicy

MAX_EPOCHS = 5
SLOTS = ("early", "mid", "late")
ENV_SEED = 11
PARAM_COST = 2.0
# G1 at germination, G2 after one training epoch, two blending steps: a seed germinated after epoch e trains
# (isolated, alpha 0) during epoch e + 1 and blends from epoch e + 2.
FAST_LIFECYCLE = LifecycleConfig(min_training_epochs=1, min_probe_contribution=-100.0, min_seed_gradient_ratio=0.0,
                                 blending_steps=2, min_blending_epochs=1, max_probation_epochs=3)


def _germinate(slot: str, blueprint: str, blend: str) -> LifecycleCommand:
    return LifecycleCommand(LifecycleOp.GERMINATE, slot, blueprint, blend)


def _cull(slot: str) -> LifecycleCommand:
    return LifecycleCommand(LifecycleOp.CULL, slot)


class Script:
    """Issues a fixed command after given epochs and WAITs otherwise."""

    def __init__(self, name: str, commands: Mapping[int, LifecycleCommand]) -> None:
        self.name = name
        self.commands = dict(commands)

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        command = self.commands.get(obs.epoch, LifecycleCommand(LifecycleOp.WAIT))
        return TamiyoDecision.from_command(command, space=obs.action_space, reason="script", confidence=1.0)


def _scripts(blueprint: str) -> list[Script]:
    return [
        Script("culled_in_training", {1: _germinate("mid", blueprint, "linear"), 2: _cull("mid"),
                                      3: _germinate("late", "norm", "gated"), 4: _cull("late")}),
        Script("germinated_last", {4: _germinate("early", blueprint, "sigmoid")}),
        Script("blended", {1: _germinate("mid", blueprint, "linear")}),
    ]


NEVER_BLEND = ("culled_in_training", "germinated_last")


def _dropout_transformer(width: float = 1.0) -> TransformerHost:
    return TransformerHost(vocab_size=VOCAB_SIZE, n_embd=32, n_head=4, n_layer=3, block_size=64, dropout=0.1)


# per task: TaskSpec overrides, the scripts' blueprint, batch size, train and validation sample caps
SETUPS = {
    "synthetic": ({}, "conv_light", 64, 256, 256),
    "synthetic_text": ({"host_factory": _dropout_transformer}, "mlp", 32, 128, 64),
}


@dataclasses.dataclass
class Run:
    task: TaskSpec
    scripts: list[Script]
    twin: MorphoEnv
    envs: list[MorphoEnv]
    results: list[EpisodeResult]
    steps: dict[str, list[EnvStep]]


@pytest.fixture(scope="module", params=list(SETUPS))
def run(request: pytest.FixtureRequest) -> Run:
    overrides, blueprint, batch_size, max_train, max_val = SETUPS[request.param]
    task = dataclasses.replace(get_task_spec(request.param), lifecycle=FAST_LIFECYCLE, **overrides)
    device = torch.device("cpu")
    data = EpochData.build(task, DataCache(DataOptions()), [device], batch_size=batch_size, seed=5,
                           max_train_samples=max_train, max_val_samples=max_val)
    twin = MorphoEnv(EnvSpec(task, SLOTS, MAX_EPOCHS, env_seed=ENV_SEED, device=device, env_id=99), "twin")
    scripts = _scripts(blueprint)
    controllers: list[TamiyoPolicy] = [*scripts, RandomPolicy(3)]
    envs = [MorphoEnv(EnvSpec(task, SLOTS, MAX_EPOCHS, env_seed=ENV_SEED, device=device, env_id=i), c.name, twin=twin)
            for i, c in enumerate(controllers)]
    steps: dict[str, list[EnvStep]] = {c.name: [] for c in controllers}

    def on_step(completed: list[EnvStep]) -> None:
        for step in completed:
            steps[step.env.controller_name].append(step)

    results = run_episodes(envs, controllers, data, make_reward_fn("gap", task, 1.0, param_cost=PARAM_COST),
                           on_step=on_step)
    return Run(task, scripts, twin, envs, results, steps)


def _env(run: Run, name: str) -> MorphoEnv:
    [env] = [e for e in run.envs if e.controller_name == name]
    return env


def test_the_scripts_did_what_they_say(run: Run) -> None:
    for script in run.scripts:
        steps = run.steps[script.name]
        assert all(s.action_success for s in steps)
        assert {s.epoch: s.decision.command for s in steps if s.decision.command.op != LifecycleOp.WAIT} == (
            script.commands)
    for name in NEVER_BLEND:  # no seed of these envs ever had a non-zero alpha
        stages = {s.record.after.slots[slot].stage for s in run.steps[name]  # type: ignore[union-attr]
                  for slot in SLOTS if s.record.after.slots[slot] is not None}
        assert stages == {SeedStage.TRAINING}
    blended = [s.row().slots["mid"] for s in run.steps["blended"]]
    assert any(summary is not None and summary.alpha > 0 for summary in blended)


@pytest.mark.parametrize("name", NEVER_BLEND)
def test_an_env_whose_seeds_never_blend_is_bit_identical_to_its_twin(run: Run, name: str) -> None:
    """Training seeds are isolated and seed initialization draws from its own stream: until a seed blends, the
    env trains exactly the network its twin trains."""
    env = _env(run, name)
    assert len(env.accuracy_curve) == len(run.twin.accuracy_curve) == MAX_EPOCHS
    assert env.accuracy_curve == run.twin.accuracy_curve
    assert env.loss_curve == run.twin.loss_curve
    for name_, p in env.model.host.state_dict().items():
        assert torch.equal(p, run.twin.model.host.state_dict()[name_]), name_


def test_a_blended_seed_changes_the_network(run: Run) -> None:
    """The contrast that keeps the bit-identity test honest: once a seed blends, the env's losses leave the twin's."""
    env = _env(run, "blended")
    assert env.loss_curve[:2] == run.twin.loss_curve[:2]  # germinated after epoch 1, training alone in epoch 2
    assert env.loss_curve[2:] != run.twin.loss_curve[2:]


def test_the_twin_trains_beside_its_envs_but_never_decides(run: Run) -> None:
    assert run.twin.action_counts == {op.name: 0 for op in LifecycleOp}
    assert run.twin.model.seeds_present() == 0
    for result in run.results:
        assert result.twin_final_accuracy == run.twin.accuracy_curve[-1]


def test_an_episode_has_one_transition_per_decision(run: Run) -> None:
    """Decisions follow epochs 1 … T − 1 (none after the last epoch); only the last one is terminal."""
    for env, result in zip(run.envs, run.results, strict=True):
        steps = run.steps[env.controller_name]
        assert [s.epoch for s in steps] == [s.record.epoch for s in steps] == list(range(1, MAX_EPOCHS))
        assert [s.record.is_terminal for s in steps] == [False] * (MAX_EPOCHS - 2) + [True]
        assert [(s.record.before.epoch, s.record.after.epoch) for s in steps] == [
            (e, e + 1) for e in range(1, MAX_EPOCHS)]
        assert sum(result.action_counts.values()) == MAX_EPOCHS - 1
        assert result.total_reward == pytest.approx(math.fsum(s.reward.total() for s in steps), abs=1e-12)


def test_the_gap_return_is_the_final_gap_minus_parameter_and_intervention_costs(run: Run) -> None:
    """Undiscounted, the gap rewards of a real episode sum to g_T − λ·p_T − Σc, read off the episode's result."""
    lm = run.task.task_type == "lm"
    for env, result in zip(run.envs, run.results, strict=True):
        assert result.twin_final_accuracy is not None
        if lm:
            final_gap = 100.0 * (run.twin.loss_curve[-1] - result.final_loss)
        else:
            final_gap = result.final_accuracy - result.twin_final_accuracy
        param_ratio = result.params_added / result.host_params
        costs = math.fsum(INTERVENTION_COSTS[LifecycleOp[op]] * n for op, n in result.action_counts.items())
        expected = final_gap - PARAM_COST * param_ratio + costs - DEFAULT_GOVERNOR_DEATH_PENALTY * result.rollbacks
        got = math.fsum(s.reward.total() for s in run.steps[env.controller_name])
        assert math.isclose(got, expected, rel_tol=0.0, abs_tol=1e-9), (env.controller_name, got, expected)
    grown = {r.controller: r for r in run.results}
    assert grown["blended"].params_added > 0 and grown["germinated_last"].params_added > 0
    assert grown["culled_in_training"].params_added == 0
    # the never-blending envs end level with the twin, so their return is pure cost
    assert grown["germinated_last"].final_accuracy == grown["germinated_last"].twin_final_accuracy
    assert grown["germinated_last"].final_loss == run.twin.loss_curve[-1]


COMPUTE_COST = 0.8


def test_the_compute_charged_return_is_the_gap_at_equal_training_compute(run: Run) -> None:
    """The measurements carry the env's and the twin's cumulative FLOPs: the twin's epochs all cost the same, the
    first epoch (before any decision) costs the env what it costs the twin, and the compute-charged rewards of the
    episode's records sum to g_T − λ_c·(F_env(T)/F_twin(T) − 1)."""
    lm = run.task.task_type == "lm"
    config = GapRewardConfig(cost=COMPUTE_COST, charge="compute", lm=lm)
    per_epoch = run.twin.flops.total // MAX_EPOCHS
    assert per_epoch > 0 and run.twin.flops.total == MAX_EPOCHS * per_epoch
    for env, result in zip(run.envs, run.results, strict=True):
        records = [s.record for s in run.steps[env.controller_name]]
        measured = [records[0].before, *(r.after for r in records)]
        assert [m.twin_train_flops for m in measured] == [per_epoch * e for e in range(1, MAX_EPOCHS + 1)]
        assert measured[0].train_flops == per_epoch and measured[-1].train_flops == result.train_flops
        final = measured[-1]
        assert final.twin_val_accuracy is not None and final.twin_val_loss is not None
        gap = 100.0 * (final.twin_val_loss - final.val_loss) if lm else final.val_accuracy - final.twin_val_accuracy
        expected = (gap - COMPUTE_COST * (result.train_flops / run.twin.flops.total - 1.0)
                    - DEFAULT_GOVERNOR_DEATH_PENALTY * result.rollbacks)
        got = math.fsum(compute_reward(r, config, 1.0).total() for r in records)
        assert math.isclose(got, expected, rel_tol=0.0, abs_tol=1e-9), (env.controller_name, got, expected)
    flops = {r.controller: r.train_flops for r in run.results}
    assert flops["blended"] > run.twin.flops.total  # growth costs compute, and the charge sees it


def _slot_row(row: StepRow, slot: str) -> tuple[str, float] | None:
    summary = row.slots[slot]
    return None if summary is None else (summary.stage, summary.alpha)


def test_step_rows_log_the_lifecycle_of_the_measured_epoch(run: Run) -> None:
    """Row e describes epoch e as it was trained and measured: a germination after epoch e shows up in row e + 1."""
    rows = [s.row() for s in run.steps["blended"]]
    assert [_slot_row(r, "mid") for r in rows] == [
        None, ("TRAINING", 0.0), ("BLENDING", 0.5), ("BLENDING", 1.0)]
    assert [r.seed_params > 0 for r in rows] == [False, True, True, True]
    assert rows[1].slots["mid"].counterfactual is None  # type: ignore[union-attr]  # alpha 0: nothing to ablate
    assert rows[2].slots["mid"].counterfactual is not None  # type: ignore[union-attr]
    env = _env(run, "blended")
    for e, (row, step) in enumerate(zip(rows, run.steps["blended"], strict=True), start=1):
        assert (row.epoch, row.op, row.val_accuracy, row.reward) == (
            e, step.decision.command.op.name, env.accuracy_curve[e - 1], step.reward.total())
        assert row.seed_params == step.record.before.seed_param_count_total
    last = [_slot_row(s.row(), "early") for s in run.steps["germinated_last"]]
    assert last == [None] * (MAX_EPOCHS - 1)  # germinated after the last decision: never measured, never logged
    assert StepRow.from_dict(rows[2].to_dict()) == rows[2]
