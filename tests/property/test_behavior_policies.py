"""Property tests of datagen behaviour policies over random valid observations.

Whatever the observation, preset, ε and temperature: the logged op distributions sum to 1 and exclude invalid ops,
the logged probabilities are those of the executed action, the joint probability follows the factored formula,
and the joint probabilities form a distribution whose op marginals are the logged behaviour probabilities.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from esper.datagen.configs import POLICY_PRESETS, BehaviorPolicyConfig
from esper.datagen.policies import BehaviorPolicy
from esper.leyline import (
    BlendAction,
    EnvObservation,
    LifecycleOp,
    SeedStage,
    SlotAction,
)
from esper.tamiyo import check_decision
from unit.datagen.support import joint_probabilities
from unit.tamiyo.helpers import make_obs, make_report, space_of

CNN = space_of("cnn")
NUM_JOINT_ACTIONS = CNN.num_joint_actions

STAGES = [SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY,
          SeedStage.FOSSILIZED]
GREEDY_PRESETS = [p for p, c in POLICY_PRESETS.items() if c.epsilon == 0.0]


@st.composite
def observations(draw: st.DrawFn) -> EnvObservation:
    reports = []
    for slot in ("early", "mid", "late"):
        if draw(st.booleans()):
            stage = draw(st.sampled_from(STAGES))
            counterfactual = draw(st.none() | st.floats(-3.0, 3.0))
            epochs = draw(st.integers(0, 10))
            total = epochs + draw(st.integers(0, 3))
            reports.append(make_report(slot, stage, epochs_in_stage=epochs, epochs_total=total,
                                       counterfactual=counterfactual, improvement=draw(st.floats(-3.0, 3.0))))
    obs = make_obs(reports, epoch=draw(st.integers(1, 24)), plateau=draw(st.integers(0, 8)))
    if draw(st.booleans()):  # narrower blueprint/blend heads, as another topology or a constrained env might offer
        rows = tuple(
            tuple(b != 0 and (b == keep or draw(st.booleans())) for b in range(CNN.num_blueprints))
            for keep in draw(st.lists(st.integers(1, 4), min_size=3, max_size=3))
        )
        keep_blend = draw(st.integers(0, 2))
        blends = tuple(b == keep_blend or draw(st.booleans()) for b in range(len(BlendAction)))
        obs = replace(obs, validity=replace(obs.validity, slot_blueprint=rows, blend=blends))
    return obs


@st.composite
def policies(draw: st.DrawFn) -> BehaviorPolicy:
    preset = draw(st.sampled_from(list(POLICY_PRESETS)))
    config = POLICY_PRESETS[preset]
    if config.epsilon == 0.0 and draw(st.booleans()):
        config = config.with_epsilon(draw(st.sampled_from([0.05, 0.1, 0.2, 0.5, 1.0])))
    config = config.with_overrides(temperature=draw(st.sampled_from([0.05, 0.5, 1.0, 3.0])))
    return BehaviorPolicy(config, draw(st.integers(0, 2**31)), space=CNN)


def expected_exploration(obs: EnvObservation, op: LifecycleOp, slot: SlotAction, blueprint: int,
                         blend: BlendAction) -> float:
    """The uniform dependent draw's probability, computed from the validity tables directly."""
    v = obs.validity
    p = 1.0 / sum(v.op)
    if op == LifecycleOp.WAIT:
        return p
    p /= sum(v.op_slot[op])
    if op == LifecycleOp.GERMINATE:
        p /= sum(v.slot_blueprint[slot]) * sum(v.blend)
    return p


@given(policies(), observations())
def test_logged_probabilities_match_the_executed_action(policy: BehaviorPolicy, obs: EnvObservation) -> None:
    analysis = policy.analyse(obs)
    joint = joint_probabilities(policy, obs)
    decision = policy.decide(obs)
    check_decision(decision, obs)
    action = decision.factored
    assert action is not None
    probs = decision.info["action_probabilities"]
    eps = policy.config.epsilon
    valid_ops = {op.name for op in LifecycleOp if obs.validity.op[op]}

    assert set(probs["greedy_probs"]) == set(probs["behavior_probs"]) == valid_ops  # invalid ops: probability 0
    assert math.isclose(sum(probs["greedy_probs"].values()), 1.0, abs_tol=1e-9)
    assert math.isclose(sum(probs["behavior_probs"].values()), 1.0, abs_tol=1e-9)
    for op, p in probs["behavior_probs"].items():
        assert math.isclose(p, (1 - eps) * probs["greedy_probs"][op] + eps / len(valid_ops), abs_tol=1e-12)
    assert probs["sampled_action"] == action.op.name
    assert probs["behavior_prob"] == probs["behavior_probs"][action.op.name]
    assert probs["epsilon"] == eps

    greedy = action == analysis.greedy_targets[action.op]
    formula = (1 - eps) * analysis.greedy_probs[action.op] * greedy + eps * expected_exploration(
        obs, action.op, action.slot, action.blueprint, action.blend)
    p = decision.info["joint_behavior_prob"]
    assert math.isclose(p, formula, rel_tol=1e-9, abs_tol=1e-15)
    assert math.isclose(p, joint[CNN.joint_index(action)], rel_tol=1e-12)
    assert 0.0 < p <= probs["behavior_prob"] * (1 + 1e-12)
    assert decision.info["joint_behavior_logp"] == math.log(p)


@given(policies(), observations())
def test_joint_probabilities_form_a_distribution(policy: BehaviorPolicy, obs: EnvObservation) -> None:
    joint = joint_probabilities(policy, obs)
    mask = obs.validity.joint_mask()
    assert len(joint) == NUM_JOINT_ACTIONS
    assert math.isclose(sum(joint), 1.0, abs_tol=1e-9)
    assert all(p == 0.0 for p, valid in zip(joint, mask) if not valid)
    probs = policy.analyse(obs).op_probabilities(LifecycleOp.WAIT, explored=False).behavior_probs
    for op in LifecycleOp:
        marginal = sum(p for i, p in enumerate(joint) if CNN.from_joint_index(i).op == op)
        assert math.isclose(marginal, probs.get(op.name, 0.0), abs_tol=1e-9)


@given(st.sampled_from(GREEDY_PRESETS), observations(), st.sampled_from([0.1, 0.3, 0.7]))
def test_epsilon_variants_mix_the_same_greedy_policy(preset: str, obs: EnvObservation, eps: float) -> None:
    greedy = BehaviorPolicy(POLICY_PRESETS[preset], space=CNN).analyse(obs)
    mixed = BehaviorPolicy(BehaviorPolicyConfig.from_preset(preset).with_epsilon(eps), space=CNN).analyse(obs)
    assert mixed.greedy_probs == greedy.greedy_probs and mixed.greedy_targets == greedy.greedy_targets
    for i in range(NUM_JOINT_ACTIONS):
        action = CNN.from_joint_index(i)
        assert math.isclose(mixed.joint_prob(action),
                            (1 - eps) * greedy.joint_prob(action) + eps * greedy.exploration_prob(action),
                            abs_tol=1e-12)


@given(st.integers(1, 24), st.integers(0, 8), st.floats(1.0, 3.0), st.integers(0, 2**31))
def test_random_preset_is_uniform_when_all_four_ops_are_valid(epoch: int, plateau: int, c: float, seed: int) -> None:
    reports = [make_report("early", SeedStage.PROBATIONARY, counterfactual=c),
               make_report("late", SeedStage.TRAINING, epochs_in_stage=2, improvement=-c)]
    obs = make_obs(reports, epoch=epoch, plateau=plateau)
    assert all(obs.validity.op)
    probs = BehaviorPolicy(POLICY_PRESETS["random"], seed, space=CNN).decide(obs).info["action_probabilities"]
    assert probs["behavior_probs"] == {op: 0.25 for op in ("WAIT", "GERMINATE", "CULL", "FOSSILIZE")}
