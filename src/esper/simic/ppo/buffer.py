"""The rollout of one PPO batch in preallocated `[steps, envs]` tensors, and the advantages computed over it.

Step t holds the decisions every env took after epoch t + 1 (what the policy saw and chose) and the reward that
decision earned, credited one epoch later. The envs of a batch run their episodes in lock-step, so every env has the
same number of steps and the advantage recursions run backwards over time for all envs at once. The update reads
the rollout env-major (each env's steps in order), the order its minibatch indices address.

Rewards and the advantage recursions stay in float64 on the CPU and round to float32 once, at the end: the numbers
of a plain per-step loop in Python floats, bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from esper.env.masks import HEAD_KEYS
from esper.leyline.constants import NUM_BLENDS, NUM_OPS, NUM_SLOTS
from esper.tamiyo import TamiyoDecision

__all__ = ["Minibatch", "PolicyStep", "RolloutBuffer", "env_major", "gae", "group_advantages"]


@dataclass(frozen=True)
class PolicyStep:
    """One batched policy forward for the envs of an epoch ([envs, ...] tensors on the policy's device), and the
    decisions the envs execute."""

    raw: torch.Tensor  # observation features as measured (the normalizer's input)
    states: torch.Tensor  # normalized features: what the network saw
    actions: dict[str, torch.Tensor]  # head → long; heads irrelevant to the op hold 0
    log_probs: torch.Tensor
    values: torch.Tensor
    masks: dict[str, torch.Tensor]  # head → the mask each head sampled under (all-True for irrelevant heads)
    decisions: list[TamiyoDecision]
    teacher: torch.Tensor | None = None  # a residual policy's teachers' choices [envs, 4] (`teacher.teacher_rows`)


@dataclass(frozen=True)
class Minibatch:
    """Rows of the env-major rollout, `index` into it (for the matching returns and advantages)."""

    index: torch.Tensor
    states: torch.Tensor
    actions: dict[str, torch.Tensor]
    log_probs: torch.Tensor
    values: torch.Tensor
    masks: dict[str, torch.Tensor]
    teacher: torch.Tensor | None


class RolloutBuffer:
    """`steps` decisions of `envs` envs; `device` holds what the network reads, the CPU the rewards. `residual`: the
    steps carry the teachers' choices, which a residual policy's update evaluates its actions against."""

    def __init__(self, steps: int, envs: int, state_dim: int, num_blueprints: int,
                 device: str | torch.device = "cpu", *, residual: bool = False) -> None:
        self.steps, self.envs, self.device = steps, envs, torch.device(device)

        def zeros(*shape: int, dtype: torch.dtype = torch.float32, on: torch.device = self.device) -> torch.Tensor:
            return torch.zeros(steps, envs, *shape, dtype=dtype, device=on)

        sizes = {"op": NUM_OPS, "slot": NUM_SLOTS, "blueprint": num_blueprints, "blend": NUM_BLENDS}
        self.raw = zeros(state_dim)
        self.states = zeros(state_dim)
        self.actions = {h: zeros(dtype=torch.long) for h in HEAD_KEYS}
        self.log_probs = zeros()
        self.values = zeros()
        self.masks = {h: zeros(sizes[h], dtype=torch.bool) for h in HEAD_KEYS}
        self.rewards = zeros(dtype=torch.float64, on=torch.device("cpu"))
        self.dones = zeros(dtype=torch.bool, on=torch.device("cpu"))
        self.teacher = zeros(len(HEAD_KEYS), dtype=torch.long) if residual else None

    def add(self, t: int, step: PolicyStep) -> None:
        """Store step t's decisions (row e of `step` is env e)."""
        if (step.teacher is None) != (self.teacher is None):
            raise ValueError("a residual policy's steps carry its teachers' choices, and only its steps do")
        if self.teacher is not None and step.teacher is not None:
            self.teacher[t] = step.teacher
        self.raw[t], self.states[t] = step.raw, step.states
        self.log_probs[t], self.values[t] = step.log_probs, step.values
        for h in HEAD_KEYS:
            self.actions[h][t], self.masks[h][t] = step.actions[h], step.masks[h]

    def credit(self, t: int, positions: Sequence[int], rewards: Sequence[float], dones: Sequence[bool]) -> None:
        """The rewards (and whether the episode ended) of step t's decisions, one per env."""
        if sorted(positions) != list(range(self.envs)):
            raise ValueError(f"step {t}: rewards for envs {sorted(positions)}, expected one for each of {self.envs}")
        self.rewards[t, list(positions)] = torch.tensor(rewards, dtype=torch.float64)
        self.dones[t, list(positions)] = torch.tensor(dones, dtype=torch.bool)

    def advantages(self, kind: Literal["gae", "group"], gamma: float, gae_lambda: float, group_size: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """(returns, advantages) env-major in float32 on the buffer's device: GAE with the value baseline (`gae`),
        or leave-one-out within groups of `group_size` envs (`group`)."""
        if kind == "group":
            returns, advantages = group_advantages(self.rewards, self.dones, gamma, group_size)
        else:
            returns, advantages = gae(self.rewards, self.values.to("cpu", torch.float64), self.dones, gamma,
                                      gae_lambda)
        return (env_major(returns).to(self.device, torch.float32),
                env_major(advantages).to(self.device, torch.float32))

    def minibatches(self, size: int, generator: torch.Generator) -> Iterator[Minibatch]:
        """Minibatches of `size` rows over a random permutation of the env-major rollout."""
        if size < 1:
            raise ValueError(f"minibatch size must be ≥ 1, got {size}")
        states, log_probs, values = (env_major(x) for x in (self.states, self.log_probs, self.values))
        actions = {h: env_major(a) for h, a in self.actions.items()}
        masks = {h: env_major(m) for h, m in self.masks.items()}
        teacher = None if self.teacher is None else env_major(self.teacher)
        permutation = torch.randperm(self.steps * self.envs, generator=generator).to(self.device)
        for start in range(0, len(permutation), size):
            i = permutation[start:start + size]
            yield Minibatch(i, states[i], {h: a[i] for h, a in actions.items()}, log_probs[i], values[i],
                            {h: m[i] for h, m in masks.items()}, None if teacher is None else teacher[i])



def env_major(x: torch.Tensor) -> torch.Tensor:
    """[steps, envs, ...] → [envs · steps, ...], each env's steps in order."""
    return x.transpose(0, 1).reshape(-1, *x.shape[2:])


def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, gamma: float, gae_lambda: float
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """(returns, advantages) [steps, envs] by generalized advantage estimation, per env. The chain resets at every
    `done` (episodes run their full length, so a `done` is always terminal); the step after the last is worth 0."""
    advantages = torch.zeros_like(values)
    next_value = next_advantage = torch.zeros_like(values[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        next_value = torch.where(dones[t], 0.0, next_value)
        next_advantage = torch.where(dones[t], 0.0, next_advantage)
        delta = rewards[t] + gamma * next_value - values[t]
        advantages[t] = delta + gamma * gae_lambda * next_advantage
        next_value, next_advantage = values[t], advantages[t]
    return advantages + values, advantages


def group_advantages(rewards: torch.Tensor, dones: torch.Tensor, gamma: float, group_size: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(returns-to-go, leave-one-out advantages) [steps, envs]: envs `group_size·g … group_size·g + K − 1` form
    group g and share a host seed, so at each step a member's return-to-go minus the mean of its peers' isolates
    what its own decisions were worth."""
    steps, envs = rewards.shape
    if group_size < 2 or envs % group_size:
        raise ValueError(f"the group advantage needs whole groups of ≥ 2 envs, got {envs} envs in groups of "
                         f"{group_size}")
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(steps - 1, -1, -1):
        running = rewards[t] + gamma * torch.where(dones[t], 0.0, running)
        returns[t] = running
    members = returns.reshape(steps, envs // group_size, group_size)
    peers = torch.tensor([[j for j in range(group_size) if j != i] for i in range(group_size)])
    peer_sum = torch.zeros_like(members)
    for k in range(group_size - 1):  # each member's peers in env order, as a plain sum adds them
        peer_sum = peer_sum + members[:, :, peers[:, k]]
    return returns, (members - peer_sum / (group_size - 1)).reshape(steps, envs)
