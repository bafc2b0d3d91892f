"""Offline to online: start PPO from an IQL policy by distilling it into the factored actor.

IQL chooses among 43 joint actions; PPO's actor samples op, then slot, then blueprint and blend, each under the
masks the previous choices leave. Distillation is behaviour cloning on the dataset's states: the IQL argmax over the
valid joint actions becomes a factored target, and each head that matters for it learns it with a cross-entropy
under the same conditioned masks PPO samples with. The observation normalizer is first fitted to the dataset's
states, so the actor sees the features scaled as PPO will scale them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from pydantic import Field, StrictFloat, StrictInt
from torch.nn import functional as F

from esper.data.tasks import TaskSpec
from esper.datagen.loader import load_transitions
from esper.datagen.transitions import TransitionDataset
from esper.env.masks import HEAD_KEYS, condition_on_action, masks_from_joint
from esper.leyline.errors import UserInputError
from esper.leyline.strict_config import BatchSize, StrictConfig
from esper.simic.iql.controller import IQLPolicy
from esper.simic.ppo.checkpoint import PPOLearnerState
from esper.simic.ppo.distributions import MaskedCategorical
from esper.simic.ppo.network import head_relevance
from esper.storage.rundir import checkpoint_file, run_dir_of

__all__ = ["DistillConfig", "DistillResult", "distill", "distill_from_iql", "iql_datasets"]


PROGRESS_EVERY = 20


class DistillConfig(StrictConfig):
    """Supervised steps that copy the IQL teacher's greedy actions into the PPO actor."""

    KIND: ClassVar[str] = "distillation config"
    steps: StrictInt = Field(default=2000, ge=1, le=10**9)
    batch_size: BatchSize = 256
    lr: StrictFloat = Field(default=1e-3, gt=0.0, le=1.0)
    seed: StrictInt = Field(default=0, ge=0, lt=2**63)


@dataclass(frozen=True)
class DistillResult:
    """`agreement`: share of the dataset's states where the distilled actor's greedy action is IQL's."""

    states: int
    agreement: float
    final_loss: float


def _targets(teacher: IQLPolicy, dataset: TransitionDataset) -> dict[str, torch.Tensor]:
    joint = teacher.action_probs(dataset.states.cpu(), dataset.valid.cpu()).argmax(dim=1)
    actions = [dataset.space.from_joint_index(int(i)) for i in joint]
    return {"op": torch.tensor([int(a.op) for a in actions]), "slot": torch.tensor([int(a.slot) for a in actions]),
            "blueprint": torch.tensor([int(a.blueprint) for a in actions]),
            "blend": torch.tensor([int(a.blend) for a in actions]), "joint": joint}


def _greedy_agreement(learner: PPOLearnerState, states: torch.Tensor, masks: dict[str, torch.Tensor],
                      targets: dict[str, torch.Tensor]) -> float:
    chosen, _, _, _ = learner.agent.act(states, masks, deterministic=True)
    relevant = head_relevance(targets["op"].to(states.device))
    same = torch.ones_like(targets["op"], dtype=torch.bool, device=states.device)
    for head in HEAD_KEYS:
        same &= ~relevant[head] | (chosen[head] == targets[head].to(states.device))
    return float(same.float().mean())


def distill(learner: PPOLearnerState, teacher: IQLPolicy, dataset: TransitionDataset, config: DistillConfig,
            progress: Callable[[str, int, int], None] | None = None) -> DistillResult:
    """Fit the learner's normalizer to the dataset and clone the teacher's greedy actions into its actor;
    `progress(phase, done, total)` hears of every `PROGRESS_EVERY` steps."""
    device = learner.agent.device
    raw = dataset.states.to(device, torch.float32)
    learner.obs_normalizer.update(raw)
    states = learner.obs_normalizer.normalize(raw)
    masks = masks_from_joint(dataset.valid.to(device), dataset.space)
    targets = _targets(teacher, dataset)
    action = {k: v.to(device) for k, v in targets.items() if k != "joint"}
    used = condition_on_action(masks, action)
    relevant = head_relevance(action["op"])
    network, generator = learner.agent.network, torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.Adam(network.parameters(), lr=config.lr)
    loss = torch.zeros(())
    for step in range(config.steps):
        if progress is not None and step % PROGRESS_EVERY == 0:
            progress("distilling the IQL policy", step, config.steps)
        rows = torch.randint(len(states), (min(config.batch_size, len(states)),), generator=generator).to(device)
        logits, _ = network(states[rows])
        loss = torch.zeros((), device=device)
        for head in HEAD_KEYS:
            log_probs = MaskedCategorical(logits[head], used[head][rows]).log_probs_all
            nll = F.nll_loss(log_probs, action[head][rows], reduction="none")
            weight = relevant[head][rows].float()
            loss = loss + (nll * weight).sum() / weight.sum().clamp(min=1.0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    if progress is not None:
        progress("distilling the IQL policy", config.steps, config.steps)
    return DistillResult(len(states), _greedy_agreement(learner, states, masks, targets), float(loss.detach()))


def distill_from_iql(learner: PPOLearnerState, init_from: str, datasets: Sequence[str] | None, task: TaskSpec,
                     slots: Sequence[str], config: DistillConfig,
                     progress: Callable[[str, int, int], None] | None = None) -> tuple[Path, DistillResult]:
    """Distill the IQL policy `init_from` ("iql:RUN") into the learner's actor, on the states of `datasets` (default:
    the ones it was trained on); returns the IQL run and the result."""
    source = Path(init_from.removeprefix("iql:"))
    teacher = IQLPolicy.from_checkpoint(checkpoint_file(source, "final.pt"), space=task.action_space, slots=slots)
    states = load_transitions(datasets or iql_datasets(source))  # states and masks only: any reward family would do
    return source, distill(learner, teacher, states, config, progress=progress)


def iql_datasets(source: Path) -> list[str]:
    """The datagen directories an IQL run was trained on (from its config.json)."""
    record = run_dir_of(source) / "config.json"
    try:
        datasets = json.loads(record.read_text(encoding="utf-8"))["config"]["datasets"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserInputError(f"Cannot tell which datasets {source} was trained on ({record} unreadable): set "
                             f"init_datasets") from None
    return [str(d) for d in datasets]
