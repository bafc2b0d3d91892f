"""Factored actor-critic for Tamiyo.

Four policy heads (op, slot, blueprint, blend) share a feed-forward trunk; the observation already carries 5-epoch
histories, so there is no recurrence. Sampling is dependent (op → slot → blueprint/blend) through joint masks, and
log-probabilities and entropies count only the heads that matter for the sampled op, so PPO ratios never move
because of a head whose choice had no effect.

A residual network (`teacher_epsilon` set) adds a teacher's prior to every head's logits (`esper.simic.ppo.teacher`):
its heads' output layers start at zero, so it starts as the teacher, and its critic has a trunk of its own, so fitting
the value function before the actor moves changes no actor parameter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch
from torch import nn

from esper.env.masks import HEAD_KEYS, condition_on_action, full_masks
from esper.leyline.actions import LifecycleOp
from esper.leyline.constants import DEFAULT_HIDDEN_DIM, NUM_BLENDS, NUM_OPS, NUM_SLOTS
from esper.simic.ppo.distributions import MaskedCategorical
from esper.simic.ppo.teacher import kl_to_prior, log_prior

__all__ = ["ActionEvaluation", "FactoredActorCritic", "head_relevance"]


class ActionEvaluation(NamedTuple):
    """Grad-carrying evaluation of stored actions. `head_entropies` are per-step normalized entropies of every head
    (relevant or not); combine them with `head_relevance` for per-head statistics. `teacher_kl`: KL(π ‖ π_T) summed
    over the relevant heads (zeros without a teacher)."""

    log_probs: torch.Tensor
    values: torch.Tensor
    entropy: torch.Tensor
    head_entropies: dict[str, torch.Tensor]
    teacher_kl: torch.Tensor


def head_relevance(op: torch.Tensor) -> dict[str, torch.Tensor]:
    """Which heads influence the executed command: op always, slot unless WAIT, blueprint/blend for GERMINATE."""
    germinate = op == LifecycleOp.GERMINATE
    return {
        "op": torch.ones_like(op, dtype=torch.bool),
        "slot": op != LifecycleOp.WAIT,
        "blueprint": germinate,
        "blend": germinate,
    }


def _grad_safe(t: torch.Tensor) -> torch.Tensor:
    """Outputs of `get_action_batch` are inference tensors, which autograd refuses to save; copy those."""
    return t.clone() if t.is_inference() else t


def _linear(in_dim: int, out_dim: int, gain: float) -> nn.Linear:
    """Orthogonal init with zero bias (√2 for hidden layers; 0.01 policy outputs start near-uniform; value 1.0)."""
    layer = nn.Linear(in_dim, out_dim)
    nn.init.orthogonal_(layer.weight, gain=gain)
    nn.init.zeros_(layer.bias)
    return layer


def _trunk(state_dim: int, hidden_dim: int) -> nn.Sequential:
    return nn.Sequential(
        _linear(state_dim, hidden_dim, math.sqrt(2)),
        nn.LayerNorm(hidden_dim),
        nn.ReLU(),
        _linear(hidden_dim, hidden_dim, math.sqrt(2)),
        nn.LayerNorm(hidden_dim),
        nn.ReLU(),
    )


def _mlp_head(hidden_dim: int, out_dim: int, output_gain: float) -> nn.Sequential:
    return nn.Sequential(
        _linear(hidden_dim, hidden_dim // 2, math.sqrt(2)), nn.ReLU(), _linear(hidden_dim // 2, out_dim, output_gain)
    )


class FactoredActorCritic(nn.Module):
    def __init__(
        self,
        state_dim: int,
        *,
        num_blueprints: int,
        num_slots: int = NUM_SLOTS,
        num_blends: int = NUM_BLENDS,
        num_ops: int = NUM_OPS,
        hidden_dim: int = DEFAULT_HIDDEN_DIM,
        op_bias: Sequence[float] = (),
        teacher_epsilon: float | None = None,
    ) -> None:
        """`op_bias` (one value per op, in `LifecycleOp` order; empty: all zero) is the op head's initial output bias:
        the initial policy's log-odds between ops, e.g. a negative CULL bias lets more random seeds live through
        their lifecycle while exploring. `teacher_epsilon` (None: no teacher) makes the network residual to a
        teacher smoothed with that much of uniform."""
        super().__init__()
        if state_dim < 1 or hidden_dim < 2 or hidden_dim % 2:
            raise ValueError(f"Need state_dim ≥ 1 and an even hidden_dim ≥ 2, got {state_dim}, {hidden_dim}")
        if teacher_epsilon is not None and (op_bias or not 0.0 <= teacher_epsilon < 1.0):
            raise ValueError(f"A residual network needs ε in [0, 1) and no op bias, got {teacher_epsilon}, {op_bias}")
        self.state_dim = state_dim
        self.teacher_epsilon = teacher_epsilon
        self.trunk = _trunk(state_dim, hidden_dim)
        sizes = {"op": num_ops, "slot": num_slots, "blueprint": num_blueprints, "blend": num_blends}
        self.heads = nn.ModuleDict({name: _mlp_head(hidden_dim, sizes[name], 0.01) for name in HEAD_KEYS})
        # The critic's own trunk (residual networks only): None means the value head reads the actor's trunk.
        self.value_trunk = _trunk(state_dim, hidden_dim) if teacher_epsilon is not None else None
        if teacher_epsilon is not None:
            for head in self.heads.values():
                nn.init.zeros_(head[-1].weight)  # type: ignore[index]
                nn.init.zeros_(head[-1].bias)  # type: ignore[index]
        if op_bias:
            if len(op_bias) != num_ops:
                raise ValueError(f"op_bias needs one value per op ({num_ops}), got {len(op_bias)}")
            op_out = self.heads["op"][-1]  # type: ignore[index]
            assert isinstance(op_out, nn.Linear)
            with torch.no_grad():
                op_out.bias.copy_(torch.tensor(op_bias, dtype=torch.float32))
        self.value_head = _mlp_head(hidden_dim, 1, 1.0)

    @property
    def residual(self) -> bool:
        return self.teacher_epsilon is not None

    def residual_is_zero(self) -> bool:
        """A residual network whose heads output zero in every state: the mode of each head is its teacher's choice,
        so greedily it decides exactly as its teacher (an initial policy, or one whose heads never moved)."""
        outputs = [head[-1] for head in self.heads.values()]  # type: ignore[index]
        return self.residual and not any(o.weight.any() or o.bias.any() for o in outputs)

    def actor_parameters(self) -> list[nn.Parameter]:
        """What the actor's logits depend on (for a residual network, nothing the critic's loss reaches)."""
        return [*self.trunk.parameters(), *self.heads.parameters()]

    def critic_parameters(self) -> list[nn.Parameter]:
        trunk = [] if self.value_trunk is None else list(self.value_trunk.parameters())
        return [*trunk, *self.value_head.parameters()]

    def forward(self, states: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        features = self.trunk(states)
        logits = {name: head(features) for name, head in self.heads.items()}
        critic_features = features if self.value_trunk is None else self.value_trunk(states)
        return logits, self.value_head(critic_features).squeeze(-1)

    def _check_teacher(self, teacher: torch.Tensor | None) -> None:
        if (teacher is None) == self.residual:
            raise ValueError("a residual network needs the teachers' choices, and only a residual network takes them")

    @torch.inference_mode()
    def get_action_batch(
        self,
        states: torch.Tensor,
        masks: Mapping[str, torch.Tensor],
        deterministic: bool = False,
        generator: torch.Generator | None = None,
        teacher: torch.Tensor | None = None,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Dependent sampling for states [B, D] → (actions {head: LongTensor[B]}, log_probs, values, used masks);
        a residual network also takes the teachers' choices [B, 4] (`teacher.teacher_rows`).

        Heads irrelevant to the sampled op store the placeholder 0 (WAIT: slot, blueprint, blend; CULL/FOSSILIZE:
        blueprint, blend).
        """
        self._check_teacher(teacher)
        full = {k: v.to(states.device) for k, v in full_masks(masks).items()}
        logits, values = self(states)
        chosen: dict[str, torch.Tensor] = {}

        def choose(head: str, mask: torch.Tensor) -> torch.Tensor:
            head_logits = logits[head]
            if teacher is not None:
                head_logits = head_logits + log_prior(head, teacher, chosen, mask, self._epsilon)
            dist = MaskedCategorical(head_logits, mask)
            return dist.mode() if deterministic else dist.sample(generator)

        op = chosen["op"] = choose("op", full["op"])
        zeros = torch.zeros_like(op)
        slot = chosen["slot"] = choose("slot", condition_on_action(full, {"op": op, "slot": zeros})["slot"])
        used = condition_on_action(full, {"op": op, "slot": slot})
        relevant = head_relevance(op)
        actions = {
            "op": op,
            "slot": torch.where(relevant["slot"], slot, zeros),
            "blueprint": torch.where(relevant["blueprint"], choose("blueprint", used["blueprint"]), zeros),
            "blend": torch.where(relevant["blend"], choose("blend", used["blend"]), zeros),
        }
        evaluation = self._evaluate(logits, values, actions, used, teacher)
        return actions, evaluation.log_probs, values, used

    def evaluate_heads(
        self, states: torch.Tensor, actions: Mapping[str, torch.Tensor], used_masks: Mapping[str, torch.Tensor],
        teacher: torch.Tensor | None = None,
    ) -> ActionEvaluation:
        """Joint log-prob, value, joint entropy and per-head entropies of stored actions (with gradients)."""
        self._check_teacher(teacher)
        logits, values = self(states)
        used = {k: _grad_safe(used_masks[k].to(states.device)) for k in HEAD_KEYS}
        chosen = {k: _grad_safe(actions[k].to(states.device)) for k in HEAD_KEYS}
        return self._evaluate(logits, values, chosen, used, None if teacher is None else _grad_safe(teacher))

    @torch.no_grad()
    def greedy_op_overrides(self, states: torch.Tensor, op_mask: torch.Tensor, teacher: torch.Tensor) -> float:
        """The share of `states` whose greedy op is not the teacher's: how far the greedy policy has left its teacher
        on the first head (a KL this small and that large can mean the same decisions or different ones)."""
        self._check_teacher(teacher)
        logits, _ = self(states)
        prior = log_prior("op", teacher, {}, op_mask, self._epsilon)
        greedy = MaskedCategorical(logits["op"] + prior, op_mask).mode()
        return float((greedy != teacher[:, 0]).float().mean()) if len(greedy) else 0.0

    @property
    def _epsilon(self) -> float:
        assert self.teacher_epsilon is not None
        return self.teacher_epsilon

    def _evaluate(
        self,
        logits: Mapping[str, torch.Tensor],
        values: torch.Tensor,
        actions: Mapping[str, torch.Tensor],
        used: Mapping[str, torch.Tensor],
        teacher: torch.Tensor | None,
    ) -> ActionEvaluation:
        """log p = Σ over relevant heads of log p(head); entropy = Σ over relevant heads of normalized H(head); with
        a teacher, each head's logits carry its prior and KL(π ‖ π_T) sums over the relevant heads too."""
        relevant = head_relevance(actions["op"])
        log_probs = torch.zeros_like(values)
        entropy = torch.zeros_like(values)
        teacher_kl = torch.zeros_like(values)
        head_entropies: dict[str, torch.Tensor] = {}
        for head in HEAD_KEYS:
            head_logits = logits[head]
            if teacher is not None:
                prior = log_prior(head, teacher, actions, used[head], self._epsilon)
                teacher_kl = teacher_kl + torch.where(relevant[head], kl_to_prior(head_logits, prior, used[head]), 0.0)
                head_logits = head_logits + prior
            dist = MaskedCategorical(head_logits, used[head])
            head_entropy = dist.entropy()
            log_probs = log_probs + torch.where(relevant[head], dist.log_prob(actions[head]), 0.0)
            entropy = entropy + torch.where(relevant[head], head_entropy, 0.0)
            head_entropies[head] = head_entropy
        return ActionEvaluation(log_probs, values, entropy, head_entropies, teacher_kl)
