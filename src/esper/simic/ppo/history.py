"""history.jsonl: one typed row per PPO rollout batch (batch outcome, throughput and the update's health)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["UPDATE_METRICS", "PPOHistoryRow"]


@dataclass(frozen=True, slots=True)
class PPOHistoryRow:
    """Outcome of one rollout batch. The PPO metrics are None when the update was skipped (then `skipped_update`)."""

    FILE: ClassVar[str] = "history.jsonl"

    batch: int
    episodes_completed: int
    n_envs: int
    avg_accuracy: float
    rolling_accuracy: float
    best_rolling_accuracy: float
    env_accuracies: list[float]
    avg_reward: float
    action_shares: dict[str, float]
    reward_components: dict[str, float]
    seeds_created: int
    seeds_fossilized: int
    seeds_culled: int
    rollbacks: int
    anomalies: list[str]
    rollout_seconds: float
    update_seconds: float
    env_epochs_per_second: float
    batch_loads: int
    updates_run: int
    policy_loss: float | None = None
    value_loss: float | None = None
    entropy: float | None = None
    approx_kl: float | None = None
    clip_fraction: float | None = None
    ratio_mean: float | None = None
    ratio_std: float | None = None
    grad_norm: float | None = None
    entropy_op: float | None = None
    entropy_slot: float | None = None
    entropy_blueprint: float | None = None
    entropy_blend: float | None = None
    ratio_max: float | None = None
    ratio_min: float | None = None
    n_minibatch_updates: int | None = None
    explained_variance: float | None = None
    entropy_coef: float | None = None
    early_stopped: float | None = None
    early_stop_epoch: int | None = None
    skipped_update: float | None = None
    # Residual policies only: the KL to the teacher and its weight, the actor's learning-rate factor, 1.0 for the
    # critic warm-up's batches (the actor did not move), and the share of the batch's states whose greedy op is not
    # the teacher's (before the update).
    teacher_kl: float | None = None
    teacher_kl_coef: float | None = None
    actor_lr_scale: float | None = None
    critic_warmup: float | None = None
    greedy_op_overrides: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if not (f.name in UPDATE_METRICS and getattr(self, f.name) is None)}


UPDATE_METRICS: frozenset[str] = frozenset(
    f.name for f in dataclasses.fields(PPOHistoryRow) if f.default is None
)
"""Fields that come from the PPO update's metrics dict (all optional)."""
