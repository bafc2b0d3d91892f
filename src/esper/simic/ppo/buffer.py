"""Rollout buffer for factored actions with per-environment GAE.

Transitions are kept per env and read back in env-major order (ascending env_id, insertion order within an env), so
the interleaving in which lock-stepped envs report never changes any env's returns, and one env's episode never
leaks into another's advantage chain.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple, TypedDict

import torch

from esper.env.masks import condition_on_action

__all__ = ["FactoredBatch", "FactoredRolloutBuffer", "FactoredTransition"]


class FactoredTransition(NamedTuple):
    state: torch.Tensor
    slot_action: int
    blueprint_action: int
    blend_action: int
    op_action: int
    log_prob: float
    value: float
    reward: float
    done: bool
    slot_mask: torch.Tensor
    blueprint_mask: torch.Tensor
    blend_mask: torch.Tensor
    op_mask: torch.Tensor
    env_id: int = 0


class FactoredBatch(TypedDict):
    states: torch.Tensor
    actions: dict[str, torch.Tensor]
    old_log_probs: torch.Tensor
    values: torch.Tensor
    action_masks: dict[str, torch.Tensor]


class FactoredRolloutBuffer:
    def __init__(self) -> None:
        self._by_env: dict[int, list[FactoredTransition]] = {}

    def add(
        self,
        state: torch.Tensor,
        action: Mapping[str, int | torch.Tensor],
        log_prob: float | torch.Tensor,
        value: float | torch.Tensor,
        reward: float,
        done: bool,
        action_masks: Mapping[str, torch.Tensor],
        env_id: int = 0,
    ) -> None:
        """Store one step. `action_masks` may be the four used masks or a full mask dict; both are conditioned on
        the action (idempotent for used masks), so irrelevant heads always carry all-True masks."""
        used = condition_on_action(action_masks, action)
        self._by_env.setdefault(int(env_id), []).append(
            FactoredTransition(
                state=state.detach(),
                slot_action=int(action["slot"]),
                blueprint_action=int(action["blueprint"]),
                blend_action=int(action["blend"]),
                op_action=int(action["op"]),
                log_prob=float(log_prob),
                value=float(value),
                reward=float(reward),
                done=bool(done),
                slot_mask=used["slot"].detach(),
                blueprint_mask=used["blueprint"].detach(),
                blend_mask=used["blend"].detach(),
                op_mask=used["op"].detach(),
                env_id=int(env_id),
            )
        )

    def __len__(self) -> int:
        return sum(len(steps) for steps in self._by_env.values())

    def clear(self) -> None:
        self._by_env.clear()

    @property
    def steps(self) -> list[FactoredTransition]:
        """All transitions in env-major order."""
        return [t for env_id in sorted(self._by_env) for t in self._by_env[env_id]]

    def group_relative_advantages(
        self, gamma: float, group_size: int, device: str | torch.device = "cpu"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Leave-one-out advantages (env-major order): envs `group_size·g … group_size·g + K − 1` form group g and
        share a host seed, so at each decision index a member's return-to-go minus the mean of the other members'
        isolates what its own decisions were worth. Returns (returns-to-go, advantages)."""
        returns_by_env: dict[int, list[float]] = {}
        for env_id in sorted(self._by_env):
            steps = self._by_env[env_id]
            running, out = 0.0, [0.0] * len(steps)
            for i in range(len(steps) - 1, -1, -1):
                running = steps[i].reward + gamma * (0.0 if steps[i].done else running)
                out[i] = running
            returns_by_env[env_id] = out
        returns: list[float] = []
        advantages: list[float] = []
        for env_id in sorted(self._by_env):
            group = env_id // group_size
            peers = [returns_by_env[e] for e in returns_by_env if e // group_size == group and e != env_id]
            own = returns_by_env[env_id]
            if not peers or any(len(p) != len(own) for p in peers):
                raise ValueError(f"env {env_id}: the group advantage needs complete episodes of every group member")
            returns.extend(own)
            advantages.extend(g - sum(p[t] for p in peers) / len(peers) for t, g in enumerate(own))
        return (torch.tensor(returns, dtype=torch.float32, device=device),
                torch.tensor(advantages, dtype=torch.float32, device=device))

    def compute_returns_and_advantages(
        self, last_value: float, gamma: float, gae_lambda: float, device: str | torch.device = "cpu"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE per env (env-major order). The chain resets at every `done` (episodes run their full length, so a
        `done` is always terminal); an env's unfinished tail bootstraps from `last_value`."""
        returns: list[float] = []
        advantages: list[float] = []
        for env_id in sorted(self._by_env):
            env_steps = self._by_env[env_id]
            env_adv = [0.0] * len(env_steps)
            next_value, next_adv = float(last_value), 0.0
            for i in range(len(env_steps) - 1, -1, -1):
                step = env_steps[i]
                if step.done:
                    next_value = 0.0
                    next_adv = 0.0
                delta = step.reward + gamma * next_value - step.value
                env_adv[i] = delta + gamma * gae_lambda * next_adv
                next_value, next_adv = step.value, env_adv[i]
            advantages.extend(env_adv)
            returns.extend(a + s.value for a, s in zip(env_adv, env_steps))
        return (
            torch.tensor(returns, dtype=torch.float32, device=device),
            torch.tensor(advantages, dtype=torch.float32, device=device),
        )

    def get_batches(
        self, batch_size: int, device: str | torch.device = "cpu", generator: torch.Generator | None = None
    ) -> Iterator[tuple[FactoredBatch, torch.Tensor]]:
        """Minibatches over a random permutation; `indices` address the env-major order of `steps`/GAE outputs."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
        steps = self.steps
        n = len(steps)
        if n == 0:
            return
        states = torch.stack([t.state for t in steps]).to(device)

        def column(name: str, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor([getattr(t, name) for t in steps], dtype=dtype, device=device)

        actions = {head: column(f"{head}_action", torch.long) for head in ("slot", "blueprint", "blend", "op")}
        masks = {
            head: torch.stack([getattr(t, f"{head}_mask") for t in steps]).to(device)
            for head in ("slot", "blueprint", "blend", "op")
        }
        old_log_probs = column("log_prob", torch.float32)
        values = column("value", torch.float32)
        permutation = torch.randperm(n, generator=generator).to(device)
        for start in range(0, n, batch_size):
            idx = permutation[start : start + batch_size]
            batch: FactoredBatch = {
                "states": states[idx],
                "actions": {k: v[idx] for k, v in actions.items()},
                "old_log_probs": old_log_probs[idx],
                "values": values[idx],
                "action_masks": {k: v[idx] for k, v in masks.items()},
            }
            yield batch, idx
