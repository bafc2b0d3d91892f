"""Datagen configs: presets, round trips, validation, ε variants, probabilities, metadata."""

from __future__ import annotations

import math

import pytest

from esper.datagen.configs import (
    ENVIRONMENT_PRESETS,
    POLICY_PRESETS,
    ActionProbabilities,
    BehaviorPolicyConfig,
    EnvironmentConfig,
    StepMetadata,
    state_hash,
)

ENV_TABLE = {
    "baseline": ("HostCNN", 0.01, 128, "SGD"),
    "fast-lr": ("HostCNN", 0.1, 128, "SGD"),
    "slow-lr": ("HostCNN", 0.001, 128, "SGD"),
    "wide": ("HostCNN-Wide", 0.01, 128, "SGD"),
    "deep": ("HostCNN-Deep", 0.01, 128, "SGD"),
    "adam": ("HostCNN", 0.001, 128, "Adam"),
    "small-batch": ("HostCNN", 0.01, 64, "SGD"),
    "large-batch": ("HostCNN", 0.02, 256, "SGD"),
    "resnet18": ("ResNet-18", 0.01, 128, "SGD"),
    "resnet34": ("ResNet-34", 0.01, 128, "SGD"),
    "resnet34-adam": ("ResNet-34", 0.001, 128, "Adam"),
    "resnet34-slow": ("ResNet-34", 0.005, 128, "SGD"),
    "resnet34-small-batch": ("ResNet-34", 0.01, 64, "SGD"),
}
POLICY_TABLE = {  # min, plateau, cull, strategy, epsilon
    "baseline": (5, 3, 5, "threshold", 0.0),
    "early-intervener": (3, 2, 5, "threshold", 0.0),
    "late-intervener": (8, 5, 5, "threshold", 0.0),
    "quick-culler": (5, 3, 3, "threshold", 0.0),
    "patient-culler": (5, 3, 8, "threshold", 0.0),
    "blueprint-explorer": (5, 3, 5, "threshold", 0.0),
    "aggressive": (3, 2, 3, "threshold", 0.0),
    "conservative": (8, 5, 8, "threshold", 0.0),
    "random": (5, 3, 5, "threshold", 1.0),
    "anti-kasmina": (5, 3, 5, "inverted", 0.0),
    "periodic": (5, 3, 5, "periodic", 0.0),
}


def test_environment_presets_match_the_table() -> None:
    assert list(ENVIRONMENT_PRESETS) == list(ENV_TABLE)
    for config_id, (arch, lr, batch, optimizer) in ENV_TABLE.items():
        config = EnvironmentConfig.from_preset(config_id)
        assert (config.config_id, config.architecture, config.learning_rate, config.batch_size, config.optimizer) \
            == (config_id, arch, lr, batch, optimizer)
        assert (config.momentum, config.weight_decay, config.max_epochs) == (0.9, 0.0, 25)


def test_policy_presets_match_the_table() -> None:
    assert list(POLICY_PRESETS) == list(POLICY_TABLE)
    for policy_id, (mn, plateau, cull, strategy, eps) in POLICY_TABLE.items():
        c = BehaviorPolicyConfig.from_preset(policy_id)
        assert (c.min_epochs_before_germinate, c.plateau_epochs_to_germinate,
                c.cull_after_epochs_without_improvement, c.strategy, c.epsilon) == (mn, plateau, cull, strategy, eps)
    assert POLICY_PRESETS["blueprint-explorer"].blueprint_preference == ("conv_light", "attention", "norm", "depthwise")
    assert POLICY_PRESETS["baseline"].blueprint_preference is None


def test_defaults() -> None:
    env = EnvironmentConfig(config_id="x", architecture="HostCNN", learning_rate=0.01, batch_size=128, optimizer="SGD")
    assert env.momentum == 0.9 and env.max_epochs == 25
    policy = BehaviorPolicyConfig(policy_id="test")
    assert (policy.min_epochs_before_germinate, policy.epsilon, policy.temperature, policy.germinate_period) \
        == (5, 0.0, 1.0, 5)


@pytest.mark.parametrize("preset", list(ENVIRONMENT_PRESETS))
def test_environment_round_trip(preset: str) -> None:
    config = EnvironmentConfig.from_preset(preset)
    assert EnvironmentConfig.from_dict(config.to_dict()) == config
    assert config.with_max_epochs(7).to_dict() == {**config.to_dict(), "max_epochs": 7}


@pytest.mark.parametrize("preset", list(POLICY_PRESETS))
def test_policy_round_trip(preset: str) -> None:
    config = BehaviorPolicyConfig.from_preset(preset)
    data = config.to_dict()
    assert BehaviorPolicyConfig.from_dict(data) == config
    assert data["blueprint_preference"] is None or isinstance(data["blueprint_preference"], list)


def test_unknown_presets_list_the_available_ones() -> None:
    with pytest.raises(ValueError, match=r"Unknown environment preset 'nope'.*baseline.*resnet34-small-batch"):
        EnvironmentConfig.from_preset("nope")
    with pytest.raises(ValueError, match=r"Unknown behaviour policy preset 'nope'.*anti-kasmina.*periodic"):
        BehaviorPolicyConfig.from_preset("nope")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"architecture": "VGG"}, "architecture: Input should be 'HostCNN', .* got \"VGG\""),
        ({"optimizer": "RMSprop"}, "optimizer: Input should be 'SGD' or 'Adam'"),
        ({"learning_rate": True}, "learning_rate"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate": math.nan}, "learning_rate"),
        ({"batch_size": 0}, "batch_size"),
        ({"momentum": 1.0}, "momentum"),
        ({"max_epochs": 1}, "max_epochs"),
    ],
)
def test_environment_validation(change: dict[str, object], match: str) -> None:
    data = {**ENVIRONMENT_PRESETS["baseline"].to_dict(), **change}
    with pytest.raises(ValueError, match=match):
        EnvironmentConfig.from_dict(data)


def test_from_dict_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match=r"Unknown environment config keys: \['lr'\]. Valid keys: config_id, "):
        EnvironmentConfig.from_dict({**ENVIRONMENT_PRESETS["baseline"].to_dict(), "lr": 0.1})


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"strategy": "chaotic"}, "strategy"),
        ({"epsilon": 1.5}, "epsilon"),
        ({"temperature": 0.0}, "temperature"),
        ({"germinate_period": 0}, "germinate_period"),
        ({"cull_after_epochs_without_improvement": -1}, "cull_after"),
        ({"blueprint_preference": ("norm", "norm")}, "unique"),
        ({"blueprint_preference": ()}, "non-empty"),
    ],
)
def test_policy_validation(change: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BehaviorPolicyConfig(policy_id="p", **change)  # type: ignore[arg-type]


def test_with_epsilon_names_the_variant() -> None:
    config = BehaviorPolicyConfig.from_preset("baseline").with_epsilon(0.2)
    assert (config.policy_id, config.epsilon) == ("baseline-eps0.2", 0.2)
    assert BehaviorPolicyConfig.from_preset("random").with_epsilon(1.0).policy_id == "random-eps1.0"
    with pytest.raises(ValueError, match=r"explores with ε = 1\.0 by definition"):
        BehaviorPolicyConfig.from_preset("random").with_epsilon(0.1)


def test_compute_behavior_prob() -> None:
    greedy = {"WAIT": 0.9, "GERMINATE": 0.05, "FOSSILIZE": 0.03, "CULL": 0.02}
    assert ActionProbabilities.compute_behavior_prob(greedy, "WAIT", 0.0) == 0.9
    one_hot = {"WAIT": 1.0, "GERMINATE": 0.0, "FOSSILIZE": 0.0, "CULL": 0.0}
    assert ActionProbabilities.compute_behavior_prob(one_hot, "GERMINATE", 0.2) == pytest.approx(0.05)
    # Only valid ops are listed, so the uniform term spreads over them alone.
    assert ActionProbabilities.compute_behavior_prob({"WAIT": 1.0, "CULL": 0.0}, "CULL", 0.2) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="not among the valid ops"):
        ActionProbabilities.compute_behavior_prob({"WAIT": 1.0}, "CULL", 0.2)


def test_from_decision() -> None:
    greedy = {"WAIT": 0.8, "GERMINATE": 0.1, "FOSSILIZE": 0.05, "CULL": 0.05}
    ap = ActionProbabilities.from_decision(greedy, "GERMINATE", 0.1)
    assert (ap.greedy_action, ap.sampled_action, ap.was_exploratory) == ("WAIT", "GERMINATE", True)
    assert ap.behavior_prob == pytest.approx(0.9 * 0.1 + 0.1 / 4) == ap.behavior_probs["GERMINATE"]
    assert sum(ap.behavior_probs.values()) == pytest.approx(1.0)
    assert ActionProbabilities.from_decision(greedy, "WAIT", 0.1, was_exploratory=True).was_exploratory
    assert set(ap.to_dict()) == {"greedy_probs", "behavior_probs", "behavior_prob", "greedy_action",
                                 "sampled_action", "was_exploratory", "epsilon"}


def test_greedy_ties_follow_the_op_order() -> None:
    tied = {"CULL": 0.25, "FOSSILIZE": 0.25, "GERMINATE": 0.25, "WAIT": 0.25}
    assert ActionProbabilities.greedy_argmax(tied) == "WAIT"
    assert ActionProbabilities.greedy_argmax({"CULL": 0.5, "FOSSILIZE": 0.5}) == "FOSSILIZE"
    assert ActionProbabilities.greedy_argmax({"CULL": 0.4, "GERMINATE": 0.4, "WAIT": 0.2}) == "GERMINATE"


def test_state_hash_and_step_metadata() -> None:
    features = [0.1234567, 1.0, -2.5]
    assert state_hash(features) == state_hash([0.12345671, 1.0, -2.5])  # equal after rounding to 6 decimals
    assert state_hash(features) != state_hash([0.1234, 1.0, -2.5])
    assert len(state_hash(features)) == 16 and int(state_hash(features), 16) >= 0
    assert state_hash([math.nan]) == state_hash([math.inf])  # non-finite values hash like JSON null
    meta = StepMetadata(3, False, state_hash(features), 1, None, 0.8).to_dict()
    assert meta == {"timestep": 3, "done": False, "truncated": False, "state_hash": state_hash(features),
                    "active_seed_count": 1, "best_seed_accuracy": None, "training_budget_remaining": 0.8}
