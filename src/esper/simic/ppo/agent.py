"""PPO for the factored Tamiyo policy: the policy network, its optimizer, and the update.

`update` reads top to bottom like CleanRL's: given a rollout and its advantages, epochs × minibatches of clipped
policy loss, clipped value loss and an entropy bonus, with target-KL early stopping measured on the minibatch just
optimized.

A residual policy (a `teacher`) starts gently: its first updates fit the critic alone (`critic_only`: the actor's
parameters get no gradient), then the actor's learning rate warms up linearly over `actor_warmup_updates` updates,
and a KL(π ‖ π_T) penalty, annealed linearly from `teacher_kl_start` to `teacher_kl_end` over the run's updates,
keeps it near its teacher until the returns say otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from esper.leyline.actions import ActionSpace
from esper.leyline.constants import ANOMALY_RATIO_COLLAPSE, ANOMALY_RATIO_EXPLOSION
from esper.leyline.seeding import derive_seed
from esper.simic.ppo.anomaly import RatioExplosionDiagnostic
from esper.simic.ppo.buffer import RolloutBuffer, env_major
from esper.simic.ppo.metrics import UpdateStats
from esper.simic.ppo.network import FactoredActorCritic, head_relevance
from esper.simic.ppo.ppo_config import PPOConfig
from esper.storage.checkpoint import detached_copy

__all__ = ["PPOAgent"]


class PPOAgent:
    """Everything PPO owns for one policy, built from its `PPOConfig` alone and the run's `seed` (so a checkpoint
    rebuilds it)."""

    def __init__(self, config: PPOConfig, *, seed: int, state_dim: int, space: ActionSpace,
                 device: str | torch.device = "cpu") -> None:
        self.config = config
        self.seed = seed
        self.state_dim = state_dim
        self.space = space
        self.device = torch.device(device)
        # The entropy bonus anneals per update call; a rollout batch runs `ppo_updates_per_batch` of them.
        self.entropy_anneal_steps = (math.ceil(config.entropy_anneal_episodes / config.n_envs)
                                     * config.ppo_updates_per_batch)
        self.network = FactoredActorCritic(state_dim, num_blueprints=space.num_blueprints,
                                           hidden_dim=config.hidden_dim, op_bias=config.op_bias(),
                                           teacher_epsilon=config.residual_epsilon()).to(self.device)
        # A residual policy's actor and critic are separate parameter groups: the actor's rate warms up alone.
        groups = ([{"params": self.network.actor_parameters()}, {"params": self.network.critic_parameters()}]
                  if self.network.residual else [{"params": list(self.network.parameters())}])
        self.optimizer = torch.optim.Adam(groups, lr=config.lr, eps=1e-5)
        self.actor_updates_total = math.ceil(config.n_episodes / config.n_envs) * config.ppo_updates_per_batch
        self.train_steps = 0
        # Dedicated streams: action sampling never perturbs minibatch order (and vice versa), and both resume exactly.
        self.action_generator = torch.Generator(device=self.device)
        self.action_generator.manual_seed(derive_seed(seed, "actions"))
        self.minibatch_generator = torch.Generator()
        self.minibatch_generator.manual_seed(derive_seed(seed, "minibatches"))

    def act(self, states: torch.Tensor, masks: Mapping[str, torch.Tensor], deterministic: bool = False,
            teacher: torch.Tensor | None = None
            ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Dependent sampling for states [B, D] and masks [B, ...]: actions, log-probs, values and the used masks
        (a residual policy also takes its teachers' choices [B, 4])."""
        return self.network.get_action_batch(
            states.to(self.device), masks, deterministic=deterministic, generator=self.action_generator,
            teacher=None if teacher is None else teacher.to(self.device),
        )

    def actor_lr_scale(self) -> float:
        """The actor's learning-rate factor at the next actor update: a linear warm-up over `actor_warmup_updates`."""
        warmup = self.config.actor_warmup_updates
        return 1.0 if warmup == 0 else min(1.0, (self.train_steps + 1) / warmup)

    def teacher_kl_coef(self) -> float:
        """β of the KL(π ‖ π_T) penalty at the next actor update: linear from `teacher_kl_start` to `teacher_kl_end`
        over the run's actor updates."""
        c = self.config
        progress = min(self.train_steps / max(1, self.actor_updates_total - 1), 1.0)
        return c.teacher_kl_start + progress * (c.teacher_kl_end - c.teacher_kl_start)

    def entropy_coef(self) -> float:
        """Linear anneal from `entropy_coef` to `entropy_coef_min` over the configured number of update calls."""
        c = self.config
        if self.entropy_anneal_steps == 0:
            return c.entropy_coef
        progress = min(self.train_steps / self.entropy_anneal_steps, 1.0)
        return c.entropy_coef + progress * (c.entropy_coef_min - c.entropy_coef)

    def update(self, rollout: RolloutBuffer, returns: torch.Tensor, advantages: torch.Tensor, *,
               critic_only: bool = False) -> dict[str, Any]:
        """One PPO update over the rollout, whose env-major `returns` and `advantages` are given; returns the
        update's health metrics. `critic_only` (a residual policy's warm-up) fits the value function alone."""
        c = self.config
        residual = self.network.residual
        if critic_only and not residual:
            raise ValueError("only a residual policy's critic can be fitted alone (its actor shares no parameter)")
        kl_coef = self.teacher_kl_coef() if residual else 0.0
        if residual and not critic_only:
            self.optimizer.param_groups[0]["lr"] = c.lr * self.actor_lr_scale()
        # Explained variance of the rollout's value estimates, before any step.
        values = env_major(rollout.values)
        var_returns = float(returns.var(correction=0))
        unexplained = float((returns - values).var(correction=0))
        explained_variance = 1.0 - unexplained / var_returns if var_returns > 1e-8 else 0.0
        entropy_coef = self.entropy_coef()
        overrides = None
        if residual:
            assert rollout.teacher is not None
            overrides = self.network.greedy_op_overrides(
                env_major(rollout.states), env_major(rollout.masks["op"]), env_major(rollout.teacher))

        stats = UpdateStats()
        teacher_kl_sum = torch.zeros((), device=self.device)
        early_stop_epoch: int | None = None
        ratio_diagnostic: dict[str, Any] | None = None

        for epoch in range(1, c.n_epochs + 1):
            for batch in rollout.minibatches(c.minibatch_size, self.minibatch_generator):
                actions, old_log_probs, old_values = batch.actions, batch.log_probs, batch.values
                new = self.network.evaluate_heads(batch.states, actions, batch.masks, batch.teacher)
                log_ratio = new.log_probs - old_log_probs
                ratio = log_ratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1.0) - log_ratio).mean()
                    clip_fraction = ((ratio - 1.0).abs() > c.clip_ratio).float().mean()

                mb_advantages = advantages[batch.index]
                if mb_advantages.numel() > 1:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                clipped_ratio = ratio.clamp(1.0 - c.clip_ratio, 1.0 + c.clip_ratio)
                policy_loss = -torch.min(ratio * mb_advantages, clipped_ratio * mb_advantages).mean()

                mb_returns = returns[batch.index]
                if c.value_clip is not None:
                    v_clipped = old_values + (new.values - old_values).clamp(-c.value_clip, c.value_clip)
                    value_loss = 0.5 * torch.max((new.values - mb_returns) ** 2, (v_clipped - mb_returns) ** 2).mean()
                else:
                    value_loss = 0.5 * ((new.values - mb_returns) ** 2).mean()

                entropy = new.entropy.mean()
                teacher_kl = new.teacher_kl.mean()
                if critic_only:
                    loss = c.value_coef * value_loss
                else:
                    loss = policy_loss + c.value_coef * value_loss - entropy_coef * entropy
                    if residual:
                        loss = loss + kl_coef * teacher_kl
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(self.network.parameters(), c.max_grad_norm)
                self.optimizer.step()

                teacher_kl_sum = teacher_kl_sum + teacher_kl.detach()
                kl, r_max, r_min = stats.add(
                    policy_loss=policy_loss, value_loss=value_loss, entropy=entropy, approx_kl=approx_kl,
                    clip_fraction=clip_fraction, ratio=ratio, grad_norm=grad_norm,
                    head_entropies=new.head_entropies, relevant=head_relevance(actions["op"]),
                )
                if ratio_diagnostic is None and (r_max > ANOMALY_RATIO_EXPLOSION or r_min < ANOMALY_RATIO_COLLAPSE):
                    ratio_diagnostic = RatioExplosionDiagnostic.from_batch(
                        ratio.detach(), old_log_probs, new.log_probs.detach(), actions, space=self.space
                    ).to_dict()
                if c.target_kl is not None and kl > 1.5 * c.target_kl:
                    early_stop_epoch = epoch
                    break
            if early_stop_epoch is not None:
                break

        metrics = stats.metrics()
        metrics.update(explained_variance=explained_variance, entropy_coef=entropy_coef)
        if residual:
            metrics.update(teacher_kl=float(teacher_kl_sum) / stats.n_updates, teacher_kl_coef=kl_coef,
                           actor_lr_scale=0.0 if critic_only else self.actor_lr_scale(),
                           greedy_op_overrides=overrides)
        if critic_only:
            metrics["critic_warmup"] = 1.0
        else:  # the schedules (entropy, warm-up, KL) count actor updates
            self.train_steps += 1
        if early_stop_epoch is not None:
            metrics.update(early_stopped=1.0, early_stop_epoch=early_stop_epoch)
        if ratio_diagnostic is not None:
            metrics["ratio_diagnostic"] = ratio_diagnostic
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """Plain, `weights_only`-loadable dict (CPU tensors) including both generators' states."""
        return {
            "network": detached_copy(self.network.state_dict(), "cpu"),
            "optimizer": detached_copy(self.optimizer.state_dict(), "cpu"),
            "train_steps": self.train_steps,
            "action_generator": self.action_generator.get_state(),
            "minibatch_generator": self.minibatch_generator.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.train_steps = int(state["train_steps"])
        _restore_generator(self.action_generator, state["action_generator"],
                           derive_seed(self.seed, "actions", int(state["train_steps"])))
        self.minibatch_generator.set_state(state["minibatch_generator"].cpu())


def _restore_generator(generator: torch.Generator, state: torch.Tensor, fallback_seed: int) -> None:
    """Restore a generator; a state saved on another device type (CUDA vs CPU) cannot be, so reseed instead.

    That only happens when a run moves between CPU and GPU, where bit-exact continuation is impossible anyway.
    """
    try:
        generator.set_state(state.cpu())
    except RuntimeError:
        generator.manual_seed(fallback_seed)
