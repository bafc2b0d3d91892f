"""A learned policy trained on esper's hosts drives a user's model where its observation and action sizes match
(three slots, the same blueprint head, the same topology), and is refused with the reason where they do not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import esper
from esper.simic.ppo.checkpoint import PPOLearnerState
from esper.simic.ppo.config import TrainingConfig
from unit.api.models import QUICK, SmallCNN, TokenClassifier, evaluator, image_data, token_data, train_epoch

X, Y = image_data(64, seed=1)


@pytest.fixture(scope="module")
def policy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An (untrained) PPO policy of the synthetic task, saved as a run's final checkpoint."""
    run = tmp_path_factory.mktemp("ppo")
    (run / "checkpoints").mkdir()
    state = PPOLearnerState.new(TrainingConfig.from_dict({"task": "synthetic", "teacher": "none"}),
                                torch.device("cpu"))
    state.save(run / "checkpoints" / "final.pt")
    return run


def controller(model: torch.nn.Module, policy: str) -> esper.Controller:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    return esper.Controller(model, optimizer, policy=policy, evaluate=evaluator(model, X, Y), max_epochs=25,
                            config=QUICK)


def test_a_ppo_policy_drives_a_wrapped_model_with_three_slots_and_its_blueprint_head(policy_run: Path) -> None:
    model = esper.wrap(SmallCNN(), ["stem", "layer1", "layer2"], example_input=X[:2])
    ctl = controller(model, f"ppo:{policy_run}")
    optimizer = ctl.groups.optimizer
    for _ in range(4):
        train_epoch(model, optimizer, X, Y)
        result = ctl.step({"val_accuracy": evaluator(model, X, Y)(), "val_loss": 1.0})
        assert result.command is not None and result.reason.startswith("policy")


@pytest.mark.parametrize(("make", "slots", "blueprints", "reason"), [
    (SmallCNN, ["stem", "layer1"], None, "trained with slots \\['early', 'mid', 'late'\\], not \\['early', 'mid'\\]"),
    (SmallCNN, ["stem", "layer1", "layer2"], ["norm", "conv_light"],
     "chooses among the cnn blueprints .* where it runs they are \\['conv_light', 'norm'\\]"),
    (TokenClassifier, [r"encoder\.layers\.\d", "embed"], None, "trained for topology 'cnn' .* not 'transformer'"),
])
def test_a_ppo_policy_is_refused_where_its_sizes_do_not_match(policy_run: Path, make: type[torch.nn.Module],
                                                             slots: list[str], blueprints: list[str] | None,
                                                             reason: str) -> None:
    example = X[:2] if make is SmallCNN else token_data(2, seed=0)[0]
    model = esper.wrap(make(), slots, blueprints, example_input=example)
    with pytest.raises(ValueError, match=reason):
        controller(model, f"ppo:{policy_run}")
