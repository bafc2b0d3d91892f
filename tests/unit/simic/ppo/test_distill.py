"""Offline to online: the factored actor distilled from an IQL policy takes IQL's greedy actions."""

from __future__ import annotations

import torch

from esper.data.tasks import get_task_spec
from esper.env.masks import masks_from_joint
from esper.simic.iql import IQLConfig, IQLPolicy, train_iql
from esper.simic.ppo.checkpoint import PPOLearnerState
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.distill import DistillConfig, distill
from unit.offline_toy import START, encode, mask, toy_dataset

CNN = get_task_spec("synthetic").action_space

TOY = IQLConfig(epochs=2, steps_per_epoch=75, batch_size=64, hidden_sizes=[32, 32], lr=3e-3, polyak=0.05,
                gamma=1.0, device="cpu", seed=0, agreement_samples=200)


def test_distilled_actor_agrees_with_iql_and_picks_the_best_start_actions() -> None:
    data = toy_dataset(300)
    teacher = IQLPolicy.from_learner(train_iql(TOY, data))
    learner = PPOLearnerState.new(TrainingConfig.from_dict({"hidden_dim": 64, "n_envs": 1, "group_size": 1,
                                                                "n_episodes": 1, "seed": 0}),
                                  torch.device("cpu"))
    before = learner.agent.network.state_dict()["heads.op.2.weight"].clone()
    result = distill(learner, teacher, data, DistillConfig(steps=300, batch_size=128, lr=3e-3))
    assert result.states == len(data) and result.agreement >= 0.9
    assert not torch.equal(before, learner.agent.network.state_dict()["heads.op.2.weight"])
    assert learner.obs_normalizer.update_count == 1  # fitted to the dataset's states first
    # The distilled actor's greedy joint action at each start state is IQL's, which is the best one.
    states = torch.stack([encode(s, 0) for s in START])
    valid = torch.stack([mask(START[s][0]) for s in START])
    normalized = learner.obs_normalizer.normalize(states)
    chosen, *_ = learner.agent.act(normalized, masks_from_joint(valid, CNN), deterministic=True)
    rows = torch.stack([chosen["slot"], chosen["blueprint"], chosen["blend"], chosen["op"]], 1).tolist()
    picked = [CNN.joint_index(CNN.action(*row)) for row in rows]
    assert picked == teacher.action_probs(states, valid).argmax(1).tolist() == [START[s][1] for s in START]
