"""Behaviour policies: the rules of each strategy, exploration, logging, seeding and the controller registry."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import pytest

from esper.datagen import policies
from esper.datagen.configs import POLICY_PRESETS, BehaviorPolicyConfig
from esper.datagen.policies import BehaviorPolicy, parse_behavior_spec
from esper.leyline import EnvObservation, LifecycleOp, SeedStage
from esper.tamiyo import CONTROLLERS, ControllerContext, TamiyoPolicy, check_decision
from unit.datagen.support import joint_probabilities
from unit.tamiyo.helpers import make_obs, make_report, space_of

CNN = space_of("cnn")


def create_policy(preset: str, epsilon: float | None = None, *, seed: int = 0, topology: str = "cnn"
                  ) -> BehaviorPolicy:
    return policies.create_policy(preset, epsilon, seed=seed, space=space_of(topology))


def sharp(preset: str, **changes: object) -> BehaviorPolicy:
    """A preset with a near-zero temperature: the greedy branch is effectively the argmax."""
    config = BehaviorPolicyConfig.from_preset(preset).with_overrides(temperature=1e-3, **changes)
    return BehaviorPolicy(config, space=CNN)


def decide_op(policy: BehaviorPolicy, obs: EnvObservation) -> str:
    decision = policy.decide(obs)
    check_decision(decision, obs)
    return decision.command.op.name


def test_implements_the_controller_protocol() -> None:
    policy = create_policy("aggressive")
    assert isinstance(policy, TamiyoPolicy)
    assert policy.name == "behavior:aggressive"
    assert create_policy("baseline", 0.15).config.epsilon == 0.15
    assert create_policy("baseline", 0.15).name == "behavior:baseline-eps0.15"


def test_greedy_wait_when_no_rule_fires() -> None:
    decision = create_policy("baseline").decide(make_obs(epoch=3, plateau=0))
    probs = decision.info["action_probabilities"]
    assert decision.command.op == LifecycleOp.WAIT
    assert (probs["greedy_action"], probs["sampled_action"], probs["was_exploratory"], probs["epsilon"]) \
        == ("WAIT", "WAIT", False, 0.0)
    # WAIT scores 2 and GERMINATE -10: softmax gives GERMINATE e^-12 of the mass.
    assert probs["greedy_probs"]["GERMINATE"] == pytest.approx(1 / (1 + math.exp(12)))
    assert set(probs["greedy_probs"]) == {"WAIT", "GERMINATE"}  # CULL and FOSSILIZE are invalid here


def test_baseline_germinates_on_a_plateau_in_the_first_free_slot() -> None:
    policy = sharp("baseline")
    early_busy = make_report("early", SeedStage.TRAINING, epochs_in_stage=1)
    assert decide_op(policy, make_obs(epoch=4, plateau=3)) == "WAIT"  # before min epochs
    assert decide_op(policy, make_obs(epoch=6, plateau=2)) == "WAIT"  # plateau too short
    decision = policy.decide(make_obs([early_busy], epoch=6, plateau=3))
    assert decision.command.describe() == "GERMINATE mid conv_light/sigmoid"
    analysis = policy.analyse(make_obs(epoch=6, plateau=3))
    assert analysis.scores[LifecycleOp.GERMINATE] == 6.5 and analysis.scores[LifecycleOp.WAIT] == 0.0


def test_early_intervener_germinates_where_late_intervener_waits() -> None:
    obs = make_obs(epoch=4, plateau=2)
    assert decide_op(sharp("early-intervener"), obs) == "GERMINATE"
    assert decide_op(sharp("late-intervener"), obs) == "WAIT"
    assert decide_op(sharp("late-intervener"), make_obs(epoch=8, plateau=5)) == "GERMINATE"


def test_blueprint_explorer_rotates_its_preference() -> None:
    policy = sharp("blueprint-explorer")
    planted = [policy.decide(make_obs(epoch=6, plateau=3)).command.blueprint_id for _ in range(5)]
    assert planted == ["conv_light", "attention", "norm", "depthwise", "conv_light"]


def test_cull_thresholds() -> None:
    stuck = [make_report("mid", SeedStage.TRAINING, epochs_in_stage=4, improvement=-0.5)]
    obs = make_obs(stuck, epoch=12, plateau=0)
    assert decide_op(sharp("quick-culler"), obs) == "CULL"
    assert decide_op(sharp("baseline"), obs) == "WAIT"  # needs 5 epochs in stage
    assert decide_op(sharp("patient-culler"), make_obs(stuck, epoch=12)) == "WAIT"
    improving = [make_report("mid", SeedStage.TRAINING, epochs_in_stage=9, improvement=0.5)]
    assert decide_op(sharp("quick-culler"), make_obs(improving, epoch=12)) == "WAIT"


def test_cull_targets_the_worst_seed_and_scores_its_age() -> None:
    reports = [
        make_report("early", SeedStage.TRAINING, epochs_in_stage=6, improvement=-0.2),
        make_report("late", SeedStage.BLENDING, epochs_in_stage=5, counterfactual=-1.5, improvement=3.0),
    ]
    policy = sharp("baseline")
    analysis = policy.analyse(make_obs(reports, epoch=12))
    assert analysis.greedy_targets[LifecycleOp.CULL].slot_id == "late"  # counterfactual beats raw improvement
    assert analysis.scores[LifecycleOp.CULL] == pytest.approx(4.0 + 0.3 * 5)


def test_fossilize_the_best_ready_seed() -> None:
    reports = [
        make_report("early", SeedStage.PROBATIONARY, counterfactual=1.5),
        make_report("mid", SeedStage.PROBATIONARY, counterfactual=2.5),
    ]
    policy = sharp("baseline")
    obs = make_obs(reports, epoch=15)
    analysis = policy.analyse(obs)
    assert analysis.scores[LifecycleOp.FOSSILIZE] == 5.5
    assert policy.decide(obs).command.describe() == "FOSSILIZE mid"


def test_anti_kasmina_inverts_the_rules() -> None:
    policy = sharp("anti-kasmina")
    assert decide_op(policy, make_obs(epoch=1, plateau=0)) == "GERMINATE"  # before min epochs
    assert decide_op(policy, make_obs(epoch=6, plateau=3)) == "WAIT"  # exactly when baseline would germinate
    helpful = make_report("mid", SeedStage.TRAINING, epochs_in_stage=1, epochs_total=1, improvement=0.4)
    assert policy.decide(make_obs([helpful], epoch=6, plateau=3)).command.describe() == "CULL mid"
    ready = make_report("early", SeedStage.PROBATIONARY, counterfactual=3.0)
    assert policy.analyse(make_obs([ready], epoch=6, plateau=3)).scores[LifecycleOp.FOSSILIZE] == -10.0


def test_periodic_germinates_on_schedule_fossilizes_and_never_culls() -> None:
    policy = sharp("periodic")
    assert decide_op(policy, make_obs(epoch=5, plateau=0)) == "GERMINATE"
    assert decide_op(policy, make_obs(epoch=6, plateau=9)) == "WAIT"
    assert decide_op(policy, make_obs(epoch=10, plateau=0)) == "GERMINATE"
    ready = make_report("early", SeedStage.PROBATIONARY, counterfactual=1.2)
    assert decide_op(policy, make_obs([ready], epoch=7)) == "FOSSILIZE"
    failing = make_report("mid", SeedStage.TRAINING, epochs_in_stage=20, improvement=-5.0)
    assert policy.analyse(make_obs([failing], epoch=7)).scores[LifecycleOp.CULL] == -10.0


def test_special_strategies_differ_from_baseline() -> None:
    observations = [make_obs(epoch=e, plateau=p) for e in range(1, 25) for p in (0, 3, 6)]
    baseline = [decide_op(sharp("baseline"), o) for o in observations]
    assert [decide_op(sharp("anti-kasmina"), o) for o in observations] != baseline
    assert [decide_op(sharp("periodic"), o) for o in observations] != baseline


def all_ops_valid_obs() -> EnvObservation:
    reports = [
        make_report("early", SeedStage.PROBATIONARY, counterfactual=2.0),
        make_report("mid", SeedStage.TRAINING, epochs_in_stage=2, improvement=0.1),
    ]
    obs = make_obs(reports, epoch=10, plateau=4)
    assert all(obs.validity.op)
    return obs


def test_random_policy_is_uniform_over_four_valid_ops() -> None:
    decision = create_policy("random").decide(all_ops_valid_obs())
    probs = decision.info["action_probabilities"]
    assert probs["behavior_probs"] == pytest.approx(dict.fromkeys(("WAIT", "GERMINATE", "CULL", "FOSSILIZE"), 0.25))
    assert probs["was_exploratory"] and probs["epsilon"] == 1.0


def test_epsilon_explores_and_logs_it() -> None:
    policy = create_policy("baseline", 0.5, seed=3)
    obs = make_obs(epoch=3, plateau=0)
    decisions = [policy.decide(obs) for _ in range(200)]
    flags = Counter(d.info["action_probabilities"]["was_exploratory"] for d in decisions)
    assert 60 < flags[True] < 140
    assert {d.command.op for d in decisions} == {LifecycleOp.WAIT, LifecycleOp.GERMINATE}
    germinations = {d.command.describe() for d in decisions if d.command.op == LifecycleOp.GERMINATE}
    assert len(germinations) > 5  # explored slots, blueprints and blends


def test_decision_info_and_confidence() -> None:
    decision = create_policy("baseline", 0.2, seed=1).decide(all_ops_valid_obs())
    info = decision.info
    assert set(info) == {"action_probabilities", "joint_behavior_prob", "joint_behavior_logp", "joint_index"}
    assert info["joint_behavior_logp"] == pytest.approx(math.log(info["joint_behavior_prob"]))
    assert decision.confidence == info["joint_behavior_prob"]
    assert info["joint_index"] == CNN.joint_index(decision.factored)  # type: ignore[arg-type]


def test_sampling_frequencies_match_the_logged_joint_probabilities() -> None:
    obs = all_ops_valid_obs()
    policy = create_policy("aggressive", 0.3, seed=11)
    expected = joint_probabilities(policy, obs)
    n = 6000
    counts = Counter(CNN.joint_index(policy.decide(obs).factored) for _ in range(n))  # type: ignore[arg-type]
    for index, p in enumerate(expected):
        if p == 0.0:
            assert counts[index] == 0, CNN.from_joint_index(index)
        else:
            assert abs(counts[index] / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n) + 1e-3, CNN.from_joint_index(index)


def test_seeding_is_reproducible_and_private() -> None:
    obs = all_ops_valid_obs()
    a, b = create_policy("random", seed=5), create_policy("random", seed=5)
    state = random.getstate()
    first = [a.decide(obs).command for _ in range(30)]
    assert random.getstate() == state  # the global RNG is untouched
    assert first == [b.decide(obs).command for _ in range(30)]
    assert [create_policy("random", seed=6).decide(obs).command for _ in range(30)] != first


def test_topology_handling() -> None:
    lm_obs = make_obs(epoch=6, plateau=3, topology="transformer")
    policy = BehaviorPolicy(POLICY_PRESETS["baseline"].with_overrides(temperature=1e-3), space=space_of("transformer"))
    assert policy.decide(lm_obs).command.blueprint_id == "lora"  # the topology's default head blueprint
    with pytest.raises(ValueError, match="got a 'cnn' observation"):
        policy.decide(make_obs())
    with pytest.raises(ValueError, match=r"prefers \['conv_light', 'depthwise'\], which are not transformer head"):
        create_policy("blueprint-explorer", topology="transformer")
    with pytest.raises(ValueError, match="Unknown behaviour policy preset 'nope'"):
        create_policy("nope")


@pytest.mark.parametrize(
    ("argument", "expected"),
    [("aggressive", ("aggressive", None)), ("baseline-eps0.2", ("baseline", 0.2)),
     ("anti-kasmina", ("anti-kasmina", None)), ("early-intervener-eps1", ("early-intervener", 1.0))],
)
def test_parse_behavior_spec(argument: str, expected: tuple[str, float | None]) -> None:
    assert parse_behavior_spec(argument) == expected


@pytest.mark.parametrize(("argument", "match"), [("baseline-epsx", "Cannot read ε"), ("baseline-eps2", r"\[0, 1\]")])
def test_parse_behavior_spec_errors(argument: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_behavior_spec(argument)


@pytest.mark.parametrize("preset", list(POLICY_PRESETS))
def test_every_preset_is_a_registered_controller(preset: str) -> None:
    context = ControllerContext(space=CNN, slots=("early", "mid", "late"), seed=7, index=1)
    policy = CONTROLLERS.build(f"behavior:{preset}", context)
    assert isinstance(policy, BehaviorPolicy) and policy.config == POLICY_PRESETS[preset]
    check_decision(policy.decide(all_ops_valid_obs()), all_ops_valid_obs())


def test_registry_specs_are_seeded_per_context() -> None:
    obs = all_ops_valid_obs()
    context = ControllerContext(space=CNN, slots=("early", "mid", "late"), seed=7, index=1)

    def run(spec: str, ctx: ControllerContext) -> list[str]:
        policy = CONTROLLERS.build(spec, ctx)
        return [policy.decide(obs).command.describe() for _ in range(20)]

    assert run("behavior:baseline-eps0.5", context) == run("behavior:baseline-eps0.5", context)
    assert run("behavior:baseline-eps0.5", context) != run("behavior:baseline-eps0.5", replace(context, index=2))
    built = CONTROLLERS.build("behavior:baseline-eps0.5", context)
    assert isinstance(built, BehaviorPolicy) and built.config.policy_id == "baseline-eps0.5"
    assert "behavior:PRESET[-epsE]" in CONTROLLERS.usages()
    with pytest.raises(ValueError, match="needs an argument"):
        CONTROLLERS.parse("behavior")
    with pytest.raises(ValueError, match="Unknown behaviour policy preset 'nope'"):
        CONTROLLERS.build("behavior:nope", context)
