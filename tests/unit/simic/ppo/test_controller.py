"""PPOPolicy: a NaN policy is an error (never a silent WAIT), and broken checkpoints are refused at load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from esper.data.tasks import get_task_spec
from esper.env.features import obs_dim
from esper.leyline import LifecycleOp
from esper.simic.normalization import RunningMeanStd
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.checkpoint import PPOLearnerState
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.controller import NonFinitePolicyError, PPOPolicy
from esper.storage.checkpoint import CheckpointFormatError
from esper.tamiyo import ControllerContext, SettingChangeError
from unit.tamiyo.helpers import make_obs

CNN = get_task_spec("synthetic").action_space
CONFIG = TrainingConfig.from_dict({"task": "synthetic", "max_epochs": 3, "n_envs": 2, "group_size": 1,
                                   "device": "cpu"})


def _controller(*, deterministic: bool) -> PPOPolicy:
    dim = obs_dim(CNN, CONFIG.ppo.use_telemetry)
    agent = PPOAgent(CONFIG.ppo, seed=CONFIG.seed, state_dim=dim, space=CNN)
    return PPOPolicy(agent, RunningMeanStd(dim), use_telemetry=CONFIG.ppo.use_telemetry, deterministic=deterministic)


@pytest.mark.parametrize("deterministic", [True, False])
def test_nan_weights_raise_instead_of_waiting(deterministic: bool) -> None:
    controller = _controller(deterministic=deterministic)
    assert controller.decide_batch([make_obs(), make_obs()])  # finite weights decide
    with torch.no_grad():
        for p in controller.agent.network.parameters():
            p.fill_(float("nan"))
    with pytest.raises(NonFinitePolicyError, match="non-finite"):
        controller.decide_batch([make_obs(), make_obs()])


def test_nan_observation_statistics_raise() -> None:
    controller = _controller(deterministic=True)
    controller.obs_normalizer.mean.fill_(float("nan"))
    with pytest.raises(NonFinitePolicyError, match="observation"):
        controller.decide(make_obs())


def _checkpoint(tmp_path: Path, edit: Any = None) -> Path:
    path = tmp_path / "p.pt"
    PPOLearnerState.new(CONFIG, torch.device("cpu")).save(path)
    if edit is not None:
        data = torch.load(path, weights_only=True)
        edit(data)
        torch.save(data, path)
    return path




@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["agent"]["network"].__setitem__(next(iter(d["agent"]["network"])), torch.tensor(float("inf"))),
     "non-finite"),
    (lambda d: d["obs_normalizer"]["var"].fill_(float("nan")), "obs_normalizer.var"),
    (lambda d: d.pop("agent"), "'agent'"),
    (lambda d: d["agent"].pop("network"), "'network'"),
    (lambda d: d.__setitem__("agent", [1, 2]), "must be dicts"),
    (lambda d: d["config"]["ppo"].update(hidden_dim=10**6), r"Invalid config: ppo.hidden_dim"),
    (lambda d: d["config"]["execution"].__setitem__("n_workers", d["config"]["execution"].pop("workers")),  # older
     r"execution.n_workers: Extra inputs are not permitted.*another esper version.*retrain the policy"),
    (lambda d: d.__setitem__("config", {k: v for section in ("episode", "ppo", "reward", "execution")
                                        for k, v in d["config"].pop(section).items()} | d["config"]),  # no sections
     r"records a TrainingConfig of another shape \(.*\): it was written by an esper whose config had no sections. A "
     r"checkpoint written by another esper version loads in that version: retrain the policy with this one"),
    (lambda d: d["agent"]["network"].__setitem__(next(iter(d["agent"]["network"])), torch.zeros(2, 2)),
     "size mismatch"),
])
def test_broken_checkpoints_are_refused_at_load(tmp_path: Path, edit: Any, message: str) -> None:
    path = _checkpoint(tmp_path, edit)
    with pytest.raises(CheckpointFormatError, match=message) as info:
        PPOPolicy.from_checkpoint(path)
    assert str(path) in str(info.value)


def test_good_checkpoint_loads_and_decides(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path)
    trained = TrainingConfig.from_dict(torch.load(path, weights_only=True)["config"]).episode
    setting = {"task": trained.task, "max_epochs": trained.max_epochs,
               "max_train_samples": trained.max_train_samples, "max_val_samples": trained.max_val_samples}
    context = ControllerContext(space=CNN, slots=tuple(trained.slots), setting=setting)
    controller = PPOPolicy.from_checkpoint(path, space=CNN, context=context)
    [decision] = controller.decide_batch([make_obs()])
    assert decision.reason.startswith("policy (value")


def test_another_setting_is_refused_unless_allowed(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path)
    trained = TrainingConfig.from_dict(torch.load(path, weights_only=True)["config"]).episode
    other = {"task": trained.task, "max_epochs": trained.max_epochs + 2,
             "max_train_samples": trained.max_train_samples, "max_val_samples": trained.max_val_samples}
    context = ControllerContext(space=CNN, slots=tuple(trained.slots), setting=other)
    with pytest.raises(SettingChangeError, match=f"--max-epochs {trained.max_epochs}"):
        PPOPolicy.from_checkpoint(path, context=context)
    allowed = ControllerContext(space=CNN, slots=tuple(trained.slots), setting=other, allow_setting_change=True)
    assert PPOPolicy.from_checkpoint(path, context=allowed).decide_batch([make_obs()])


def test_a_policy_refuses_another_augmentation_than_it_learned_with(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path)
    trained = TrainingConfig.from_dict(torch.load(path, weights_only=True)["config"]).episode
    own = get_task_spec(trained.task).augment_in_force(trained.augment)
    setting = {"task": trained.task, "max_epochs": trained.max_epochs, "augment": own}
    assert PPOPolicy.from_checkpoint(path, context=ControllerContext(space=CNN, slots=tuple(trained.slots),
                                                                     setting=setting))
    context = ControllerContext(space=CNN, slots=tuple(trained.slots), setting={**setting, "augment": "none"})
    with pytest.raises(SettingChangeError, match=f"augment {own} then, none now.*--augment {own}"):
        PPOPolicy.from_checkpoint(path, context=context)


def test_a_blueprint_restriction_travels_with_the_checkpoint_and_binds_every_decision(tmp_path: Path) -> None:
    config = CONFIG.with_overrides(blueprints=["norm"], initial_op_bias={"GERMINATE": 5.0})
    path = tmp_path / "p.pt"
    PPOLearnerState.new(config, torch.device("cpu")).save(path)
    sampled = PPOPolicy.from_checkpoint(path, deterministic=False)
    torch.manual_seed(0)
    step = sampled.act([make_obs() for _ in range(64)])
    germinated = {d.command.blueprint_id for d in step.decisions if d.command.op == LifecycleOp.GERMINATE}
    assert germinated == {"norm"}  # the bias makes nearly every decision a germination; none is another blueprint
    used = step.masks["blueprint"][step.actions["op"] == LifecycleOp.GERMINATE]
    assert used.tolist() == [[False, False, False, True, False]] * len(used)  # what PPO's update re-evaluates
    assert all(d.info == {} for d in step.decisions)  # the policy's tensors stay in the step, never in a decision
    greedy = PPOPolicy.from_checkpoint(path)
    valid = torch.ones(8, CNN.num_joint_actions, dtype=torch.bool)
    probs = greedy.action_probs(torch.randn(8, obs_dim(CNN, config.ppo.use_telemetry)), valid)
    chosen = [CNN.from_joint_index(int(i)) for i in probs.argmax(dim=1)]
    assert all(a.blueprint == CNN.blueprint_index("norm") for a in chosen if a.is_germinate)
    assert any(a.is_germinate for a in chosen)
