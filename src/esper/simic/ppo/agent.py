"""PPO for the factored Tamiyo policy (DESIGN §6.7, §6.8).

Deliberately CleanRL-shaped: one `update_factored` reads top to bottom — GAE, then epochs × minibatches of clipped
policy loss, clipped value loss and an entropy bonus, with target-KL early stopping measured on the minibatch just
optimized. Factored actions are the only action space.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

import esper
from esper.env.masks import HEAD_KEYS
from esper.leyline.actions import BLUEPRINT_HEAD
from esper.leyline.constants import (
    ANOMALY_RATIO_COLLAPSE,
    ANOMALY_RATIO_EXPLOSION,
    DEFAULT_CLIP_RATIO,
    DEFAULT_ENTROPY_COEF,
    DEFAULT_ENTROPY_COEF_MIN,
    DEFAULT_GAE_LAMBDA,
    DEFAULT_GAMMA,
    DEFAULT_HIDDEN_DIM,
    DEFAULT_LEARNING_RATE,
    DEFAULT_MAX_GRAD_NORM,
    DEFAULT_MINIBATCH_SIZE,
    DEFAULT_N_PPO_EPOCHS,
    DEFAULT_TARGET_KL,
    DEFAULT_VALUE_CLIP,
    DEFAULT_VALUE_COEF,
)
from esper.runtime.checkpoint import atomic_save, detached_cpu_copy, load_checkpoint
from esper.simic.ppo.anomaly import RatioExplosionDiagnostic
from esper.simic.ppo.buffer import FactoredRolloutBuffer
from esper.simic.ppo.network import FactoredActorCritic, head_relevance

__all__ = ["PPO_AGENT_FORMAT", "PPOAgent"]

PPO_AGENT_FORMAT = "esper-ppo-agent-v1"


class PPOAgent:
    def __init__(
        self,
        state_dim: int,
        *,
        lr: float = DEFAULT_LEARNING_RATE,
        gamma: float = DEFAULT_GAMMA,
        gae_lambda: float = DEFAULT_GAE_LAMBDA,
        clip_ratio: float = DEFAULT_CLIP_RATIO,
        value_coef: float = DEFAULT_VALUE_COEF,
        clip_value: bool = True,
        value_clip: float = DEFAULT_VALUE_CLIP,
        max_grad_norm: float = DEFAULT_MAX_GRAD_NORM,
        n_epochs: int = DEFAULT_N_PPO_EPOCHS,
        batch_size: int = DEFAULT_MINIBATCH_SIZE,
        target_kl: float | None = DEFAULT_TARGET_KL,
        entropy_coef: float = DEFAULT_ENTROPY_COEF,
        entropy_coef_min: float = DEFAULT_ENTROPY_COEF_MIN,
        entropy_anneal_steps: int = 0,
        hidden_dim: int = DEFAULT_HIDDEN_DIM,
        device: str | torch.device = "cpu",
        seed: int = 0,
        topology: str = "cnn",
    ) -> None:
        if n_epochs < 1 or batch_size < 1:
            raise ValueError(f"n_epochs and batch_size must be ≥ 1, got {n_epochs}, {batch_size}")
        if not 0.0 <= entropy_coef_min <= entropy_coef:
            raise ValueError(f"Need 0 ≤ entropy_coef_min ≤ entropy_coef, got {entropy_coef_min}, {entropy_coef}")
        if entropy_anneal_steps < 0:
            raise ValueError(f"entropy_anneal_steps must be ≥ 0, got {entropy_anneal_steps}")
        if target_kl is not None and target_kl <= 0:
            raise ValueError(f"target_kl must be > 0 or None, got {target_kl}")
        if topology not in BLUEPRINT_HEAD:
            raise ValueError(f"Unknown topology '{topology}'. Available: {sorted(BLUEPRINT_HEAD)}")
        self.state_dim = state_dim
        self.lr = lr
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.clip_ratio = clip_ratio
        self.value_coef = value_coef
        self.clip_value = clip_value
        self.value_clip = value_clip
        self.max_grad_norm = max_grad_norm
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.target_kl = target_kl
        self.entropy_coef = entropy_coef
        self.entropy_coef_min = entropy_coef_min
        self.entropy_anneal_steps = entropy_anneal_steps
        self.hidden_dim = hidden_dim
        self.seed = seed
        self.topology = topology
        self.device = torch.device(device)

        self.network = FactoredActorCritic(state_dim, hidden_dim=hidden_dim).to(self.device)
        self.optimizer = torch.optim.Adam(self.network.parameters(), lr=lr, eps=1e-5)
        self.buffer = FactoredRolloutBuffer()
        self.train_steps = 0
        # Dedicated streams: action sampling never perturbs minibatch order (and vice versa), and both resume exactly.
        self.action_generator = torch.Generator(device=self.device)
        self.action_generator.manual_seed(seed)
        self.minibatch_generator = torch.Generator()
        self.minibatch_generator.manual_seed(seed + 1)

    # ----------------------------------------------------------------------------------------------------- acting
    def get_action_batch(
        self, states: torch.Tensor, masks: Mapping[str, torch.Tensor], deterministic: bool = False
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Batched dependent sampling for the trainer: states [B, D], masks [B, ...] (see `FactoredActorCritic`)."""
        return self.network.get_action_batch(
            states.to(self.device), masks, deterministic=deterministic, generator=self.action_generator
        )

    def get_action(
        self, state: torch.Tensor, masks: Mapping[str, torch.Tensor], deterministic: bool = False
    ) -> tuple[dict[str, int], float, float, dict[str, torch.Tensor]]:
        """One observation ([D] or [1, D]) with unbatched or [1, ...] masks → Python action, log-prob, value."""
        single = masks["op"].dim() == 1
        batched_masks = {k: v.unsqueeze(0) if single else v for k, v in masks.items()}
        actions, log_probs, values, used = self.get_action_batch(state.reshape(1, -1), batched_masks, deterministic)
        return {k: int(v[0]) for k, v in actions.items()}, float(log_probs[0]), float(values[0]), {
            k: v[0] for k, v in used.items()
        }

    def store_factored_transition(
        self,
        state: torch.Tensor,
        action: Mapping[str, int | torch.Tensor],
        log_prob: float | torch.Tensor,
        value: float | torch.Tensor,
        reward: float,
        done: bool,
        action_masks: Mapping[str, torch.Tensor],
        truncated: bool = False,
        bootstrap_value: float = 0.0,
        env_id: int = 0,
    ) -> None:
        self.buffer.add(state, action, log_prob, value, reward, done, action_masks, truncated, bootstrap_value, env_id)

    # --------------------------------------------------------------------------------------------------- learning
    def get_entropy_coef(self) -> float:
        """Linear anneal from `entropy_coef` to `entropy_coef_min` over `entropy_anneal_steps` update calls."""
        if self.entropy_anneal_steps == 0:
            return self.entropy_coef
        progress = min(self.train_steps / self.entropy_anneal_steps, 1.0)
        return self.entropy_coef + progress * (self.entropy_coef_min - self.entropy_coef)

    def update_factored(self, last_value: float = 0.0, clear_buffer: bool = True) -> dict[str, Any]:
        """One PPO update over the buffer; returns the §6.8 metrics ({} for an empty buffer)."""
        if len(self.buffer) == 0:
            return {}
        returns, advantages = self.buffer.compute_returns_and_advantages(
            last_value, self.gamma, self.gae_lambda, device=self.device
        )
        # Explained variance of the rollout's value estimates, before any step (advantages = R − V).
        var_returns = float(returns.var(correction=0))
        explained_variance = 1.0 - float(advantages.var(correction=0)) / var_returns if var_returns > 1e-8 else 0.0
        entropy_coef = self.get_entropy_coef()

        stats = _UpdateStats()
        early_stop_epoch: int | None = None
        ratio_diagnostic: dict[str, Any] | None = None

        for epoch in range(1, self.n_epochs + 1):
            for batch, idx in self.buffer.get_batches(self.batch_size, self.device, self.minibatch_generator):
                actions, old_log_probs, old_values = batch["actions"], batch["old_log_probs"], batch["values"]
                new = self.network.evaluate_heads(batch["states"], actions, batch["action_masks"])
                log_ratio = new.log_probs - old_log_probs
                ratio = log_ratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1.0) - log_ratio).mean()
                    clip_fraction = ((ratio - 1.0).abs() > self.clip_ratio).float().mean()

                mb_advantages = advantages[idx]
                if mb_advantages.numel() > 1:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                clipped_ratio = ratio.clamp(1.0 - self.clip_ratio, 1.0 + self.clip_ratio)
                policy_loss = -torch.min(ratio * mb_advantages, clipped_ratio * mb_advantages).mean()

                mb_returns = returns[idx]
                if self.clip_value:
                    v_clipped = old_values + (new.values - old_values).clamp(-self.value_clip, self.value_clip)
                    value_loss = 0.5 * torch.max((new.values - mb_returns) ** 2, (v_clipped - mb_returns) ** 2).mean()
                else:
                    value_loss = 0.5 * ((new.values - mb_returns) ** 2).mean()

                entropy = new.entropy.mean()
                loss = policy_loss + self.value_coef * value_loss - entropy_coef * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(self.network.parameters(), self.max_grad_norm)
                self.optimizer.step()

                kl, r_max, r_min = stats.add(
                    policy_loss=policy_loss,
                    value_loss=value_loss,
                    entropy=entropy,
                    approx_kl=approx_kl,
                    clip_fraction=clip_fraction,
                    ratio=ratio,
                    grad_norm=grad_norm,
                    head_entropies=new.head_entropies,
                    relevant=head_relevance(actions["op"]),
                )
                if ratio_diagnostic is None and (r_max > ANOMALY_RATIO_EXPLOSION or r_min < ANOMALY_RATIO_COLLAPSE):
                    ratio_diagnostic = RatioExplosionDiagnostic.from_batch(
                        ratio.detach(), old_log_probs, new.log_probs.detach(), actions, topology=self.topology
                    ).to_dict()
                if self.target_kl is not None and kl > 1.5 * self.target_kl:
                    early_stop_epoch = epoch
                    break
            if early_stop_epoch is not None:
                break

        self.train_steps += 1
        if clear_buffer:
            self.buffer.clear()

        metrics = stats.metrics()
        metrics.update(explained_variance=explained_variance, entropy_coef=entropy_coef)
        if early_stop_epoch is not None:
            metrics.update(early_stopped=1.0, early_stop_epoch=early_stop_epoch)
        if ratio_diagnostic is not None:
            metrics["ratio_diagnostic"] = ratio_diagnostic
        return metrics

    # ------------------------------------------------------------------------------------------------ persistence
    def hparams(self) -> dict[str, Any]:
        """Constructor arguments (except device): enough to rebuild an identical agent."""
        return {
            "state_dim": self.state_dim,
            "lr": self.lr,
            "gamma": self.gamma,
            "gae_lambda": self.gae_lambda,
            "clip_ratio": self.clip_ratio,
            "value_coef": self.value_coef,
            "clip_value": self.clip_value,
            "value_clip": self.value_clip,
            "max_grad_norm": self.max_grad_norm,
            "n_epochs": self.n_epochs,
            "batch_size": self.batch_size,
            "target_kl": self.target_kl,
            "entropy_coef": self.entropy_coef,
            "entropy_coef_min": self.entropy_coef_min,
            "entropy_anneal_steps": self.entropy_anneal_steps,
            "hidden_dim": self.hidden_dim,
            "seed": self.seed,
            "topology": self.topology,
        }

    def state_dict(self) -> dict[str, Any]:
        """Plain, `weights_only`-loadable dict (CPU tensors) including both generators' states."""
        return {
            "hparams": self.hparams(),
            "network": detached_cpu_copy(self.network.state_dict()),
            "optimizer": detached_cpu_copy(self.optimizer.state_dict()),
            "train_steps": self.train_steps,
            "action_generator": self.action_generator.get_state(),
            "minibatch_generator": self.minibatch_generator.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.train_steps = int(state["train_steps"])
        _restore_generator(self.action_generator, state["action_generator"], self.seed + int(state["train_steps"]))
        self.minibatch_generator.set_state(state["minibatch_generator"].cpu())

    def save(self, path: str | Path) -> None:
        atomic_save({"format": PPO_AGENT_FORMAT, "esper_version": esper.__version__, **self.state_dict()}, path)

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu") -> PPOAgent:
        data = load_checkpoint(path, PPO_AGENT_FORMAT)
        agent = cls(**data["hparams"], device=device)
        agent.load_state_dict(data)
        return agent


def _restore_generator(generator: torch.Generator, state: torch.Tensor, fallback_seed: int) -> None:
    """Restore a generator; a state saved on another device type (CUDA vs CPU) cannot be, so reseed instead.

    That only happens when a run moves between CPU and GPU, where bit-exact continuation is impossible anyway.
    """
    try:
        generator.set_state(state.cpu())
    except RuntimeError:
        generator.manual_seed(fallback_seed)


_MEAN_METRICS: tuple[str, ...] = (
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_fraction",
    "ratio_mean",
    "ratio_std",
    "grad_norm",
)


class _UpdateStats:
    """Aggregates minibatch statistics into the §6.8 metrics, with one host transfer per minibatch."""

    def __init__(self) -> None:
        self.sums = dict.fromkeys(_MEAN_METRICS, 0.0)
        self.head_sums = dict.fromkeys(HEAD_KEYS, 0.0)
        self.head_counts = dict.fromkeys(HEAD_KEYS, 0.0)
        self.ratio_max, self.ratio_min = -math.inf, math.inf
        self.n_updates = 0

    @torch.no_grad()
    def add(
        self,
        *,
        policy_loss: torch.Tensor,
        value_loss: torch.Tensor,
        entropy: torch.Tensor,
        approx_kl: torch.Tensor,
        clip_fraction: torch.Tensor,
        ratio: torch.Tensor,
        grad_norm: torch.Tensor,
        head_entropies: Mapping[str, torch.Tensor],
        relevant: Mapping[str, torch.Tensor],
    ) -> tuple[float, float, float]:
        """Record one minibatch; returns its (approx_kl, ratio max, ratio min) for early stop and diagnostics."""
        r = ratio.detach()
        means = (policy_loss, value_loss, entropy, approx_kl, clip_fraction, r.mean(), r.std(correction=0), grad_norm)
        head_sums = [torch.where(relevant[h], head_entropies[h].detach(), 0.0).sum() for h in HEAD_KEYS]
        head_counts = [relevant[h].sum().float() for h in HEAD_KEYS]
        row = torch.stack([*(m.detach().float() for m in means), r.max(), r.min(), *head_sums, *head_counts]).tolist()
        k, h = len(_MEAN_METRICS), len(HEAD_KEYS)
        for name, value in zip(_MEAN_METRICS, row[:k]):
            self.sums[name] += value
        batch_max, batch_min = row[k], row[k + 1]
        self.ratio_max, self.ratio_min = max(self.ratio_max, batch_max), min(self.ratio_min, batch_min)
        for i, head in enumerate(HEAD_KEYS):
            self.head_sums[head] += row[k + 2 + i]
            self.head_counts[head] += row[k + 2 + h + i]
        self.n_updates += 1
        return row[_MEAN_METRICS.index("approx_kl")], batch_max, batch_min

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: total / self.n_updates for name, total in self.sums.items()}
        for head in HEAD_KEYS:  # mean over the steps where the head was relevant (0.0 if it never was)
            out[f"entropy_{head}"] = self.head_sums[head] / self.head_counts[head] if self.head_counts[head] else 0.0
        out.update(ratio_max=self.ratio_max, ratio_min=self.ratio_min, n_minibatch_updates=self.n_updates)
        return out
