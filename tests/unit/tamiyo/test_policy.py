"""Policy protocol, decision checks, StaticPolicy and RandomPolicy."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import FrozenInstanceError

import pytest

from esper.leyline import (
    BlendAction,
    EnvObservation,
    FactoredAction,
    LifecycleCommand,
    LifecycleOp,
    SeedStage,
    SlotAction,
)
from esper.tamiyo import (
    BatchTamiyoPolicy,
    InvalidDecisionError,
    RandomPolicy,
    StaticPolicy,
    TamiyoDecision,
    TamiyoPolicy,
    check_decision,
)
from unit.tamiyo.helpers import PLUGIN_SPACE, make_obs, make_report, space_of

WAIT = LifecycleCommand(LifecycleOp.WAIT)


def _all_ops_obs() -> EnvObservation:
    """WAIT, GERMINATE (late), CULL (early, mid) and FOSSILIZE (mid) are all valid."""
    return make_obs(
        [
            make_report("early", SeedStage.TRAINING, epochs_in_stage=2),
            make_report("mid", SeedStage.PROBATIONARY, counterfactual=2.0),
        ]
    )


def _decision(command: LifecycleCommand, topology: str = "cnn") -> TamiyoDecision:
    return TamiyoDecision.from_command(command, space=space_of(topology), reason="test", confidence=1.0)


# -- TamiyoDecision -----------------------------------------------------------------------------------------------


def test_decision_is_frozen_and_validated() -> None:
    decision = _decision(WAIT)
    with pytest.raises(FrozenInstanceError):
        decision.reason = "other"  # type: ignore[misc]
    with pytest.raises(ValueError, match="reason"):
        TamiyoDecision(WAIT, None, "", 1.0)
    with pytest.raises(ValueError, match="confidence"):
        TamiyoDecision(WAIT, None, "r", 1.5)


def test_from_command_derives_the_factored_action() -> None:
    germinate = LifecycleCommand(LifecycleOp.GERMINATE, "mid", "attention", "gated")
    assert _decision(germinate).factored == FactoredAction(SlotAction.MID, 2, BlendAction.GATED, LifecycleOp.GERMINATE)
    assert _decision(LifecycleCommand(LifecycleOp.GERMINATE, "mid", "mlp", "linear"), "transformer").factored == (
        FactoredAction(SlotAction.MID, 4, BlendAction.LINEAR, LifecycleOp.GERMINATE)
    )
    assert _decision(LifecycleCommand(LifecycleOp.GERMINATE, "mid", "conv_heavy", "sigmoid")).factored is None
    plugin = LifecycleCommand(LifecycleOp.GERMINATE, "mid", "pointwise", "sigmoid")
    assert TamiyoDecision.from_command(plugin, space=PLUGIN_SPACE, reason="r", confidence=1.0).factored == (
        FactoredAction(SlotAction.MID, 5, BlendAction.SIGMOID, LifecycleOp.GERMINATE))


# -- check_decision -----------------------------------------------------------------------------------------------


def test_check_decision_accepts_valid_decisions() -> None:
    obs = _all_ops_obs()
    for command in (
        WAIT,
        LifecycleCommand(LifecycleOp.GERMINATE, "late", "norm", "sigmoid"),
        LifecycleCommand(LifecycleOp.GERMINATE, "late", "conv_heavy", "sigmoid"),  # outside the head, factored None
        LifecycleCommand(LifecycleOp.CULL, "early"),
        LifecycleCommand(LifecycleOp.FOSSILIZE, "mid"),
    ):
        check_decision(_decision(command), obs)


@pytest.mark.parametrize(
    "command",
    [
        LifecycleCommand(LifecycleOp.GERMINATE, "early", "norm", "sigmoid"),  # occupied
        LifecycleCommand(LifecycleOp.CULL, "late"),  # empty
        LifecycleCommand(LifecycleOp.FOSSILIZE, "early"),  # TRAINING
    ],
)
def test_check_decision_rejects_commands_the_validity_forbids(command: LifecycleCommand) -> None:
    with pytest.raises(InvalidDecisionError, match="invalid"):
        check_decision(_decision(command), _all_ops_obs())


def test_check_decision_rejects_disabled_slots_and_unfossilizable_seeds() -> None:
    obs = make_obs([make_report("mid", SeedStage.PROBATIONARY, counterfactual=0.5)], enabled=["mid", "late"])
    with pytest.raises(InvalidDecisionError):
        check_decision(_decision(LifecycleCommand(LifecycleOp.GERMINATE, "early", "norm", "linear")), obs)
    with pytest.raises(InvalidDecisionError):
        check_decision(_decision(LifecycleCommand(LifecycleOp.FOSSILIZE, "mid")), obs)  # contribution < 1.0


def test_check_decision_rejects_inconsistent_factored_actions() -> None:
    obs = _all_ops_obs()
    cull_early = LifecycleCommand(LifecycleOp.CULL, "early")
    cull_mid = FactoredAction.from_command(LifecycleCommand(LifecycleOp.CULL, "mid"), space_of("cnn"))
    with pytest.raises(InvalidDecisionError, match="does not match"):
        check_decision(TamiyoDecision(cull_early, cull_mid, "r", 1.0), obs)
    with pytest.raises(InvalidDecisionError, match="no factored action"):
        check_decision(TamiyoDecision(cull_early, None, "r", 1.0), obs)
    fossilize_early = FactoredAction(SlotAction.EARLY, 0, BlendAction.LINEAR, LifecycleOp.FOSSILIZE)
    with pytest.raises(InvalidDecisionError, match="factored action"):
        check_decision(TamiyoDecision(WAIT, fossilize_early, "r", 1.0), obs)


# -- protocol and StaticPolicy ------------------------------------------------------------------------------------


class _Batched:
    name = "batched"

    def decide(self, obs: EnvObservation) -> TamiyoDecision:
        return _decision(WAIT)

    def decide_batch(self, observations: Sequence[EnvObservation]) -> list[TamiyoDecision]:
        return [self.decide(o) for o in observations]


def test_protocols_distinguish_batch_capable_policies() -> None:
    assert isinstance(StaticPolicy(), TamiyoPolicy)
    assert isinstance(RandomPolicy(0), TamiyoPolicy)
    assert not isinstance(StaticPolicy(), BatchTamiyoPolicy)
    assert isinstance(_Batched(), BatchTamiyoPolicy)


def test_static_policy_always_waits() -> None:
    policy = StaticPolicy()
    for obs in (make_obs(), _all_ops_obs(), make_obs(plateau=10, topology="transformer")):
        decision = policy.decide(obs)
        assert decision.command == WAIT and decision.factored is not None and decision.factored.op == LifecycleOp.WAIT
        assert policy.name == "static" and decision.reason
        check_decision(decision, obs)


# -- RandomPolicy -------------------------------------------------------------------------------------------------


def _observations() -> list[EnvObservation]:
    return [
        make_obs(),
        _all_ops_obs(),
        make_obs([make_report("mid", SeedStage.BLENDING, epochs_in_stage=3)], enabled=["mid", "late"]),
        make_obs([make_report("early", SeedStage.FOSSILIZED)], max_seeds=1, topology="transformer"),
    ]


def _commands(policy: RandomPolicy, rounds: int = 25) -> list[LifecycleCommand]:
    return [policy.decide(obs).command for _ in range(rounds) for obs in _observations()]


def test_random_policy_is_deterministic_given_its_seed() -> None:
    assert _commands(RandomPolicy(3)) == _commands(RandomPolicy(3))
    assert _commands(RandomPolicy(3)) != _commands(RandomPolicy(4))
    assert _commands(RandomPolicy(99)) == _commands(RandomPolicy(99))


def test_random_policy_uses_its_own_rng() -> None:
    state = random.getstate()
    _commands(RandomPolicy(1))
    assert random.getstate() == state


def test_random_policy_decisions_are_valid() -> None:
    policy = RandomPolicy(5)
    for _ in range(50):
        for obs in _observations():
            decision = policy.decide(obs)
            check_decision(decision, obs)
            assert decision.factored is not None


def test_random_policy_is_uniform_over_valid_ops_then_slots() -> None:
    obs = _all_ops_obs()
    policy = RandomPolicy(0)
    commands = [policy.decide(obs).command for _ in range(4000)]
    ops = Counter(c.op for c in commands)
    assert set(ops) == set(LifecycleOp)
    assert all(850 < n < 1150 for n in ops.values()), ops
    cull_slots = Counter(c.slot_id for c in commands if c.op == LifecycleOp.CULL)
    assert set(cull_slots) == {"early", "mid"} and min(cull_slots.values()) > 400
    germinations = [c for c in commands if c.op == LifecycleOp.GERMINATE]
    assert {c.slot_id for c in germinations} == {"late"}
    assert {c.blueprint_id for c in germinations} == {"conv_light", "attention", "norm", "depthwise"}
    assert {c.blend_id for c in germinations} == {"linear", "sigmoid", "gated"}


def test_random_policy_reports_the_probability_of_its_action() -> None:
    obs = _all_ops_obs()
    policy = RandomPolicy(2)
    expected = {
        LifecycleOp.WAIT: 1 / 4,
        LifecycleOp.GERMINATE: 1 / 4 * 1 / 1 * 1 / 4 * 1 / 3,
        LifecycleOp.CULL: 1 / 4 * 1 / 2,
        LifecycleOp.FOSSILIZE: 1 / 4,
    }
    for _ in range(200):
        decision = policy.decide(obs)
        assert decision.confidence == pytest.approx(expected[decision.command.op])
        assert decision.info["behavior_prob"] == decision.confidence


def test_random_policy_waits_when_nothing_else_is_valid() -> None:
    obs = make_obs([make_report("early", SeedStage.FOSSILIZED)], enabled=["early"])
    assert {RandomPolicy(0).decide(obs).command for _ in range(20)} == {WAIT}


def test_random_policy_draws_a_plugin_blueprint_like_any_head_blueprint() -> None:
    obs = make_obs(space=PLUGIN_SPACE)
    policy = RandomPolicy(0)
    decisions = [policy.decide(obs) for _ in range(600)]
    for decision in decisions:
        check_decision(decision, obs)
    germinated = Counter(d.command.blueprint_id for d in decisions if d.command.op == LifecycleOp.GERMINATE)
    assert set(germinated) == {"conv_light", "attention", "norm", "depthwise", "pointwise"}
