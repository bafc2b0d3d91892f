"""IQLPolicy as a Tamiyo controller: valid argmax decisions, checkpoint compatibility checks, the `iql:` spec."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from esper.data.tasks import get_task_spec
from esper.leyline import LifecycleOp, SeedStage
from esper.simic.iql import IQLConfig, IQLLearner, IQLPolicy
from esper.tamiyo import CONTROLLERS, ControllerContext, TamiyoPolicy, check_decision
from unit.offline_toy import toy_dataset
from unit.tamiyo.helpers import make_obs, make_report

CULL_EARLY, GERMINATE_MID = 37, 13  # joint indices


@pytest.fixture()
def checkpoint(tmp_path: Path) -> Path:
    """A learner whose policy prefers CULL early, then GERMINATE mid, then anything else (weights zeroed)."""
    learner = IQLLearner.for_dataset(IQLConfig(hidden_sizes=[8], device="cpu"), toy_dataset(3))
    last = learner.policy[-1]
    assert isinstance(last, nn.Linear)
    with torch.no_grad():
        last.weight.zero_()
        last.bias.zero_()
        last.bias[CULL_EARLY], last.bias[GERMINATE_MID] = 10.0, 5.0
    path = tmp_path / "final.pt"
    learner.save(path)
    return path


def test_decisions_are_the_best_valid_action(checkpoint: Path) -> None:
    policy = IQLPolicy.from_checkpoint(checkpoint)
    assert isinstance(policy, TamiyoPolicy)
    empty = make_obs()  # no seed: CULL is invalid, so the second preference wins
    decision = policy.decide(empty)
    check_decision(decision, empty)
    cnn = get_task_spec("synthetic").action_space
    assert decision.factored is not None and cnn.joint_index(decision.factored) == GERMINATE_MID
    assert decision.command.op == LifecycleOp.GERMINATE and decision.info["joint_index"] == GERMINATE_MID
    seeded = make_obs([make_report("early", SeedStage.TRAINING, epochs_in_stage=5, epochs_total=5)])
    decisions = policy.decide_batch([empty, seeded])
    check_decision(decisions[1], seeded)
    assert decisions[1].command.op == LifecycleOp.CULL and decisions[1].command.slot_id == "early"
    assert 0.0 < decisions[1].confidence <= 1.0


def test_action_probs_are_one_hot_on_valid_actions(checkpoint: Path) -> None:
    policy = IQLPolicy.from_checkpoint(checkpoint)
    valid = torch.zeros(2, 43, dtype=torch.bool)
    valid[0, [0, CULL_EARLY]] = True
    valid[1, [0, 1]] = True
    probs = policy.action_probs(torch.zeros(2, 80), valid)
    assert probs.argmax(1).tolist() == [CULL_EARLY, 0] and probs.sum(1).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="no valid joint action"):
        policy.action_probs(torch.zeros(1, 80), torch.zeros(1, 43, dtype=torch.bool))


@pytest.mark.parametrize(("key", "value", "kwargs", "message"), [
    ("feature_schema", "esper-obs-v0", {}, "'esper-obs-v0'.*'esper-obs-v1'"),
    ("topology", "cnn", {"space": get_task_spec("synthetic_text").action_space}, "'cnn', not 'transformer'"),
    ("blueprints", ["noop", "conv_light"], {"space": get_task_spec("synthetic").action_space},
     r"state_dim 80 and action_dim 43, but its blueprint head \['noop', 'conv_light'\] makes 71 and 16"),
    ("slots", ["early", "mid", "late"], {"slots": ["mid"]}, r"\['early', 'mid', 'late'\], not \['mid'\]"),
])
def test_incompatible_checkpoints_are_refused_naming_both(checkpoint: Path, key: str, value: object,
                                                          kwargs: dict[str, object], message: str) -> None:
    payload = torch.load(checkpoint, weights_only=True)
    payload[key] = value
    torch.save(payload, checkpoint)
    with pytest.raises(ValueError, match=message):
        IQLPolicy.from_checkpoint(checkpoint, **kwargs)  # type: ignore[arg-type]


def test_a_checkpoint_of_another_blueprint_set_names_both_sets_and_the_plugins(checkpoint: Path) -> None:
    payload = torch.load(checkpoint, weights_only=True)
    payload.update(blueprints=["noop", "conv_light", "attention", "norm", "depthwise", "pointwise"], state_dim=83,
                   action_dim=52, plugins=["/home/me/my_plugin.py"])
    torch.save(payload, checkpoint)
    with pytest.raises(ValueError, match=r"trained with the cnn blueprints \[.*'pointwise'\] .* this run has \[.*"
                                         r"'depthwise'\]: run it with the plugins it was trained with "
                                         r"\(--plugin /home/me/my_plugin.py\)"):
        IQLPolicy.from_checkpoint(checkpoint, space=get_task_spec("synthetic").action_space)


def test_observation_from_another_setup_is_refused(checkpoint: Path) -> None:
    policy = IQLPolicy.from_checkpoint(checkpoint)
    with pytest.raises(ValueError, match="cannot drive"):
        policy.decide(make_obs(enabled=("mid",)))


def test_registry_builds_iql_specs(checkpoint: Path) -> None:
    context = ControllerContext(space=get_task_spec("synthetic").action_space, slots=("early", "mid", "late"))
    policy = CONTROLLERS.build(f"iql:{checkpoint}", context)
    assert isinstance(policy, IQLPolicy)
    with pytest.raises(ValueError, match="needs an argument"):
        CONTROLLERS.parse("iql")
    with pytest.raises(ValueError, match="topology"):
        CONTROLLERS.build(f"iql:{checkpoint}",
                          ControllerContext(space=get_task_spec("synthetic_text").action_space, slots=("early",)))
