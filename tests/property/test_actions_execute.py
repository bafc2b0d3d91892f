"""Every sampled action is valid and executes.

A seeded loop draws 5,000 realizable lifecycle states (random enabled subsets, stages, ages, counterfactuals around
the 1.0 fossilization threshold, health, seed limits, embargoes). `FactoredActorCritic` networks with random weights
(default init, and one with inflated output layers so masked logits dominate) sample actions for all states in one
batch; each action must be valid under `compute_action_validity` and under the validity rules re-derived from the state.

For a random subset (300 states without embargo) a real `MorphoEnv` on a tiny CNNHost(channels=(4, 4, 4)) is brought
to the state through public APIs only: `germinate_seed`; `SeedSlot.step_epoch` to advance (G1; G2 after stubbed
`record_accuracy` calls, `update_gradient_ratio(1.0)` and `set_probe_contribution(1.0)`; BLENDING steps and G3);
`fossilize` with a stubbed counterfactual; extra `record_accuracy` calls for age; `set_counterfactual` for c;
`sync_telemetry` with a stubbed gradient health for `is_healthy`. The env's own observation must reproduce the
state's validity, and the sampled command runs through `check_decision` and `MorphoEnv.execute`: germinate, cull and
fossilize must all succeed.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import pytest
import torch

from esper.data.tasks import TaskSpec, get_task_spec
from esper.env.env import EnvSpec, EpochStats, MorphoEnv
from esper.env.masks import build_slot_states, compute_batch_masks
from esper.kasmina.hosts import CNNHost
from esper.kasmina.state import LifecycleConfig
from esper.leyline import (
    CANONICAL_SLOTS,
    ActionValidity,
    FactoredAction,
    LifecycleOp,
    MaskSeedInfo,
    SeedStage,
    compute_action_validity,
)
from esper.leyline.constants import MIN_CULL_AGE
from esper.simic.ppo.network import FactoredActorCritic
from esper.tamiyo import TamiyoDecision, check_decision
from esper.tolaria import TrainEpochStats, ValStats

N_STATES = 5_000
N_EXECUTED = 300
STATE_DIM = 24
CNN = get_task_spec("synthetic").action_space
LIFECYCLE = LifecycleConfig(min_training_epochs=1, blending_steps=2, min_blending_epochs=1)
MIN_C = LIFECYCLE.min_fossilize_contribution
# Age (epochs_total) with which the build path below first reaches each stage under LIFECYCLE:
# BLENDING after min_training_epochs records; PROBATIONARY after blending_steps more record + step_epoch rounds.
BASE_AGE = {SeedStage.GERMINATED: 0, SeedStage.TRAINING: 0, SeedStage.BLENDING: 1, SeedStage.PROBATIONARY: 3,
            SeedStage.FOSSILIZED: 3}
STAGES = (None, SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY,
          SeedStage.FOSSILIZED)
BLUEPRINTS = ("conv_light", "attention", "norm", "depthwise")
BLENDS = ("linear", "sigmoid", "gated")
LIVE = (SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY)


@dataclass(frozen=True)
class SeedRecipe:
    stage: SeedStage
    extra_epochs: int
    contribution: float | None
    healthy: bool
    blueprint: str
    blend: str

    @property
    def age(self) -> int:
        return BASE_AGE[self.stage] + self.extra_epochs

    @property
    def fossilize_ready(self) -> bool:
        return self.contribution is not None and self.contribution >= MIN_C and self.healthy


@dataclass(frozen=True)
class State:
    slots: dict[str, SeedRecipe | None]  # enabled slots only
    max_seeds: int  # 0 = unlimited
    embargoed: tuple[str, ...]

    @property
    def total_seeds(self) -> int:
        return sum(r is not None for r in self.slots.values())

    def mask_infos(self) -> dict[str, MaskSeedInfo | None]:
        return {s: None if r is None else MaskSeedInfo(int(r.stage), r.age, r.fossilize_ready)
                for s, r in self.slots.items()}

    def validity(self) -> ActionValidity:
        return compute_action_validity(self.mask_infos(), total_seeds=self.total_seeds, max_seeds=self.max_seeds,
                                       embargoed=self.embargoed, space=CNN)


def _contribution(rng: random.Random) -> float | None:
    u = rng.random()
    if u < 0.25:
        return None
    if u < 0.35:
        return MIN_C  # exactly at the threshold: ready
    if u < 0.45:
        return MIN_C - 1e-6  # just below: not ready
    return rng.uniform(-2.0, 3.0)


def random_state(rng: random.Random) -> State:
    enabled = [s for s in CANONICAL_SLOTS if rng.random() < 0.7] or [rng.choice(CANONICAL_SLOTS)]
    slots: dict[str, SeedRecipe | None] = {}
    for slot in enabled:
        stage = rng.choice(STAGES)
        slots[slot] = None if stage is None else SeedRecipe(
            stage, rng.choice((0, 0, 1, 2, 5)), _contribution(rng), rng.random() < 0.8, rng.choice(BLUEPRINTS),
            rng.choice(BLENDS))
    empty = [s for s, r in slots.items() if r is None]
    embargoed = tuple(s for s in empty if rng.random() < 0.2)
    return State(slots, rng.choice((0, 0, 1, 2, 3)), embargoed)


def _expected_valid(state: State, action: FactoredAction) -> bool:
    """The validity rules, re-derived from the recipe (independent of compute_action_validity)."""
    if action.op == LifecycleOp.WAIT:
        return True
    slot = action.slot_id
    if slot not in state.slots:
        return False
    recipe = state.slots[slot]
    if action.op == LifecycleOp.GERMINATE:
        budget_full = state.max_seeds > 0 and state.total_seeds >= state.max_seeds
        return (recipe is None and slot not in state.embargoed and not budget_full
                and action.blueprint != 0)
    if recipe is None:
        return False
    if action.op == LifecycleOp.CULL:
        return recipe.stage in LIVE and recipe.age >= MIN_CULL_AGE
    return recipe.stage == SeedStage.PROBATIONARY and recipe.fossilize_ready


def _networks() -> list[FactoredActorCritic]:
    torch.manual_seed(1234)
    default = FactoredActorCritic(STATE_DIM, num_blueprints=CNN.num_blueprints, hidden_dim=64)
    peaky = FactoredActorCritic(STATE_DIM, num_blueprints=CNN.num_blueprints, hidden_dim=64)
    with torch.no_grad():  # output gain 0.01 → ~uniform; inflate so some masked logits are far above valid ones
        for head in peaky.heads.values():
            head[-1].weight.mul_(500.0)
            head[-1].bias.normal_(0.0, 20.0)
    return [default, peaky]


def _sample(states: list[State]) -> list[list[FactoredAction]]:
    """Per network and draw, one action per state (all states in one batched forward)."""
    masks = compute_batch_masks([s.validity() for s in states])
    gen = torch.Generator().manual_seed(99)
    inputs = torch.randn(len(states), STATE_DIM, generator=gen) * 3.0
    draws: list[list[FactoredAction]] = []
    for net in _networks():
        for _ in range(2):
            actions, log_probs, _, _ = net.get_action_batch(inputs, masks, generator=gen)
            assert torch.isfinite(log_probs).all()
            rows = torch.stack([actions["slot"], actions["blueprint"], actions["blend"], actions["op"]], 1).tolist()
            draws.append([CNN.action(*row) for row in rows])
    return draws


@pytest.fixture(scope="module")
def sampled() -> tuple[list[State], list[list[FactoredAction]]]:
    rng = random.Random(20240601)
    states = [random_state(rng) for _ in range(N_STATES)]
    return states, _sample(states)


def test_every_sampled_action_is_valid(sampled: tuple[list[State], list[list[FactoredAction]]]) -> None:
    states, draws = sampled
    ops = {op: 0 for op in LifecycleOp}
    for actions in draws:
        for state, action in zip(states, actions, strict=True):
            validity = state.validity()
            assert validity.is_valid(action), (state, action)
            assert validity.is_valid_command(action.to_command(CNN)), (state, action)
            assert _expected_valid(state, action), (state, action)
            if action.op == LifecycleOp.WAIT:
                assert (action.slot, action.blueprint, action.blend) == (0, 0, 0)  # placeholders
            elif action.op != LifecycleOp.GERMINATE:
                assert (action.blueprint, action.blend) == (0, 0)
            ops[action.op] += 1
    assert min(ops.values()) >= 100, ops  # every op is exercised, so the property is not vacuous


# ---------------------------------------------------------------------------------------------- execution


def _task() -> TaskSpec:
    return dataclasses.replace(get_task_spec("synthetic"), host_factory=lambda width=1.0: CNNHost(channels=(4, 4, 4)),
                               lifecycle=LIFECYCLE)


def _bring_to(env: MorphoEnv, slot_id: str, recipe: SeedRecipe) -> None:
    """Drive one slot to the recipe's stage, age, contribution and health through the public slot APIs."""
    model, slot = env.model, env.model.slot(slot_id)
    model.germinate_seed(recipe.blueprint, f"prop_{slot_id}", slot=slot_id, blend_id=recipe.blend,
                         baseline_accuracy=50.0, epoch=0)
    acc, epoch = 50.0, 0

    def tick() -> None:
        nonlocal acc, epoch
        acc, epoch = acc + 1.0, epoch + 1
        slot.record_accuracy(acc)

    order = (SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY)
    target = SeedStage.PROBATIONARY if recipe.stage == SeedStage.FOSSILIZED else recipe.stage
    if order.index(target) >= 1:
        slot.step_epoch(epoch)  # G1
    if order.index(target) >= 2:
        slot.update_gradient_ratio(1.0)
        slot.set_probe_contribution(1.0)
        for _ in range(LIFECYCLE.min_training_epochs):
            tick()
        slot.step_epoch(epoch)  # G2
    if order.index(target) >= 3:
        for _ in range(LIFECYCLE.blending_steps):
            tick()
            slot.step_epoch(epoch)  # blending steps, then G3
    assert slot.state is not None and slot.state.stage == target, (recipe, slot.state)
    if recipe.stage == SeedStage.FOSSILIZED:
        slot.set_counterfactual(MIN_C + 1.0)
        assert slot.fossilize(epoch).passed
    for _ in range(recipe.extra_epochs):
        tick()
    slot.set_counterfactual(recipe.contribution)
    slot.sync_telemetry({"gradient_norm": 1.0, "gradient_health": 1.0 if recipe.healthy else 0.0,
                         "has_vanishing": False, "has_exploding": False}, finite_params=True, epoch=epoch,
                        max_epochs=10)
    assert slot.state.stage == recipe.stage and slot.state.metrics.epochs_total == recipe.age
    assert slot.state.is_healthy == recipe.healthy


def _build_env(state: State, index: int) -> MorphoEnv:
    task = _task()
    spec = EnvSpec(task, tuple(state.slots), max_epochs=10, env_seed=index, device=torch.device("cpu"),
                   max_seeds=state.max_seeds or None)
    env = MorphoEnv(spec, "property")
    for slot_id, recipe in state.slots.items():
        if recipe is not None:
            _bring_to(env, slot_id, recipe)
    env.ts.sync_optimizers()
    return env


def _execute_and_check(env: MorphoEnv, state: State, action: FactoredAction) -> None:
    stats = TrainEpochStats(2.0, 30.0, 64, {}, 1.0)
    obs = env.observe(1, EpochStats(stats, ValStats(2.0, 30.0, 64, {}, {}), rolled_back=False), batches_per_epoch=1,
                      epoch_seconds=1.0)
    assert build_slot_states(obs.slot_reports, obs.enabled_slots, MIN_C) == state.mask_infos()
    # the env's own validity equals the state's (max_seeds None means one seed per enabled slot: same rules)
    assert obs.validity == state.validity(), state
    command = action.to_command(CNN)
    check_decision(TamiyoDecision(command, action, "property test", 1.0), obs)
    assert env.execute(command, obs), (state, action)

    slot = env.model.slot(action.slot_id) if action.op != LifecycleOp.WAIT else None
    if action.op == LifecycleOp.GERMINATE:
        assert slot is not None and slot.state is not None and slot.state.stage == SeedStage.GERMINATED
        assert (slot.state.blueprint_id, slot.state.blend_id) == (command.blueprint_id, command.blend_id)
        assert action.slot_id in env.ts.seed_optimizers
    elif action.op == LifecycleOp.CULL:
        assert slot is not None and slot.state is None and action.slot_id not in env.ts.seed_optimizers
    elif action.op == LifecycleOp.FOSSILIZE:
        assert slot is not None and slot.state is not None and slot.state.stage == SeedStage.FOSSILIZED
        assert slot.state.alpha == 1.0 and action.slot_id in env.ts.fossil_order
        assert action.slot_id not in env.ts.seed_optimizers
    env.step_lifecycle(1)
    out = env.model(torch.randn(2, 3, 16, 16))
    assert out.shape == (2, 10) and torch.isfinite(out).all()


def test_sampled_actions_execute_in_a_real_model(sampled: tuple[list[State], list[list[FactoredAction]]]) -> None:
    states, draws = sampled
    rng = random.Random(7)
    by_op: dict[LifecycleOp, list[tuple[int, FactoredAction]]] = {op: [] for op in LifecycleOp}
    for actions in draws:
        for i, (state, action) in enumerate(zip(states, actions, strict=True)):
            if not state.embargoed:  # envs never embargo; embargo is a heuristic concern
                by_op[action.op].append((i, action))
    per_op = N_EXECUTED // len(by_op)  # stratified, so the rarer FOSSILIZE is executed as often as the others
    chosen = [pair for pairs in by_op.values() for pair in rng.sample(pairs, min(per_op, len(pairs)))]
    assert len(chosen) == N_EXECUTED, {op: len(p) for op, p in by_op.items()}
    for i, action in chosen:
        _execute_and_check(_build_env(states[i], i), states[i], action)
