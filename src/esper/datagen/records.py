"""Episode records: the JSON of one datagen episode (schema 3.0.0), built from the episode layer's transitions.

A decision made after epoch e is logged with what it saw (the observation and the features of epoch e, the valid
joint actions), what it did (the factored action, its joint index and the behaviour probabilities it was drawn
with) and what followed in epoch e + 1: the outcome and its reward in every reward family of the episode layer,
each a pure function of the decision's `StepRecord`, so a dataset trains a learner on any family without being
regenerated. The stored reward is the family the episode loop computed (datagen's is `gap`: growth's accuracy lead
over the static twin, minus the cost of the parameters added and of the intervention, so an episode's undiscounted
return is g_T − λ_p·p_T − Σc).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from esper.datagen.configs import OP_NAMES, StepMetadata, state_hash
from esper.env import EnvStep, MorphoEnv, feature_names, observation_features
from esper.env.rewards import RewardConfig, compute_reward
from esper.leyline import OBS_SCHEMA, ActionSpace, EnvObservation
from esper.leyline.stages import is_live_stage

__all__ = ["FEATURE_SCHEMA_NAME", "EpisodeRecorder", "feature_schema", "now_iso"]

FEATURE_SCHEMA_NAME = OBS_SCHEMA


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def _observation(obs: EnvObservation) -> dict[str, Any]:
    """The decision-time snapshot: the tracker's signals, every enabled slot, and the features."""
    s, m = obs.signals, obs.signals.metrics
    slots: dict[str, Any] = {}
    for slot in obs.enabled_slots:
        r = obs.slot_reports.get(slot)
        slots[slot] = None if r is None else {
            "stage": r.stage.name, "epochs_in_stage": r.metrics.epochs_in_current_stage,
            "alpha": r.metrics.current_alpha, "blueprint_id": r.blueprint_id,
            "counterfactual": r.metrics.counterfactual_contribution, "improvement": r.improvement,
        }
    return {
        "epoch": m.epoch, "global_step": m.global_step, "train_loss": m.train_loss, "val_loss": m.val_loss,
        "loss_delta": m.loss_delta, "train_accuracy": m.train_accuracy, "val_accuracy": m.val_accuracy,
        "accuracy_delta": m.accuracy_delta, "plateau_epochs": m.plateau_epochs,
        "best_val_accuracy": m.best_val_accuracy, "best_val_loss": m.best_val_loss,
        "loss_history_5": list(s.loss_history[-5:]), "accuracy_history_5": list(s.accuracy_history[-5:]),
        "has_active_seed": bool(s.active_seeds), "seed_stage": s.seed_stage,
        "seed_epochs_in_stage": s.seed_epochs_in_stage, "seed_alpha": s.seed_alpha,
        "seed_improvement": s.seed_improvement, "available_slots": len(s.available_slots),
        "slots": slots, "features": observation_features(obs),
    }


def _live_reports(obs: EnvObservation) -> list[Any]:
    return [r for r in obs.slot_reports.values() if is_live_stage(r.stage)]


def _stages(obs: EnvObservation) -> dict[str, str | None]:
    return {slot: (r.stage.name if (r := obs.slot_reports.get(slot)) is not None else None)
            for slot in obs.enabled_slots}


@dataclass
class _Logged:
    """One completed transition, kept until the episode ends (return-to-go needs the rewards after it)."""

    record: dict[str, Any]
    reward: float


class EpisodeRecorder:
    """Collects an env's transitions as step records (pass `record` as the episode loop's `on_step`).

    `rewards` holds every family's config by family name; the loop's own reward is stored as computed, and the
    others are computed from the same record with discount `gamma` (their potential-based shaping's).
    """

    def __init__(self, env: MorphoEnv, rewards: Mapping[str, RewardConfig], gamma: float) -> None:
        self.env = env
        self.rewards = dict(rewards)
        self.gamma = gamma
        self._steps: list[_Logged] = []
        self.stored_family: str | None = None  # the loop's reward family, known from the first step

    def record(self, steps: Sequence[EnvStep]) -> None:
        for step in steps:
            if step.env is not self.env:
                raise ValueError(f"EpisodeRecorder of env {self.env.env_id} got a step of env {step.env.env_id}")
            self._steps.append(self._step(step))

    def _step(self, step: EnvStep) -> _Logged:
        after_obs = self.env.last_observation  # the epoch after the decision, measured just now
        if after_obs is None or after_obs.epoch != step.epoch + 1:
            raise RuntimeError("EpisodeRecorder must be the loop's on_step: it reads the epoch after each decision")
        obs, decision, record = step.observation, step.decision, step.record
        before, after = record.before, record.after
        factored = decision.factored
        if factored is None:
            raise ValueError(f"Decision {decision.command.describe()} has no joint action: datagen logs head actions")
        info = decision.info
        if "action_probabilities" not in info or "joint_behavior_prob" not in info:
            raise ValueError(f"Controller of env {self.env.env_id} logs no behaviour probabilities; datagen needs a "
                             "behaviour policy (behavior:PRESET)")
        stored = step.reward
        if stored.family not in self.rewards:
            raise ValueError(f"The loop's reward family {stored.family!r} is not among those recorded, "
                             f"{sorted(self.rewards)}")
        self.stored_family = stored.family
        rewards = {family: (stored if family == stored.family else compute_reward(record, config, self.gamma)).to_dict()
                   for family, config in self.rewards.items()}
        op = decision.command.op.name
        observation = _observation(obs)
        features = observation["features"]
        live = _live_reports(obs)
        metadata = StepMetadata(
            timestep=len(self._steps), done=record.is_terminal, state_hash=state_hash(features),
            active_seed_count=len(live),
            best_seed_accuracy=max((r.metrics.best_val_accuracy for r in live), default=None),
            training_budget_remaining=(obs.max_epochs - obs.epoch) / obs.max_epochs,
        )
        entry = {
            "observation": observation,
            "action": {
                "action": op, "slot": decision.command.slot_id, "blueprint_id": decision.command.blueprint_id,
                "blend_id": decision.command.blend_id,
                "factored": [int(factored.slot), int(factored.blueprint), int(factored.blend), int(factored.op)],
                "joint_index": obs.action_space.joint_index(factored),
                "action_probabilities": info["action_probabilities"],
                "joint_behavior_prob": info["joint_behavior_prob"],
                "joint_behavior_logp": info["joint_behavior_logp"],
                "reason": decision.reason,
            },
            "rewards": rewards,
            "valid_joint_actions": list(obs.validity.joint_mask()),
            "outcome": {
                "accuracy_after": after.val_accuracy, "accuracy_change": after.val_accuracy - before.val_accuracy,
                "loss_after": after.val_loss, "loss_change": after.val_loss - before.val_loss,
                "seed_stages_after": _stages(after_obs), "action_success": step.action_success,
                "rollback": record.rollback, "reward": stored.total(),
            },
            "step_metadata": metadata.to_dict(),
            "timestamp": now_iso(),
        }
        return _Logged(entry, stored.total())

    def decisions(self) -> list[dict[str, Any]]:
        """The step records in order, each with its return-to-go (the stored rewards from it to the end)."""
        to_go = 0.0
        for logged in reversed(self._steps):
            to_go += logged.reward
            logged.record["outcome"]["return_to_go"] = to_go
        return [logged.record for logged in self._steps]

    def summary(self) -> dict[str, Any]:
        """Episode-level results of the finished env (call after the loop)."""
        env = self.env
        final = env.last_observation
        if final is None or final.epoch != env.spec.max_epochs:
            raise RuntimeError("The episode has not finished: no final observation")
        decisions = self.decisions()
        rewards = [logged.reward for logged in self._steps]
        ops = [d["action"]["action"] for d in decisions]
        counts = {op: ops.count(op) for op in OP_NAMES}
        rolled_back = env.rollbacks > 0
        if rolled_back or env.seeds_created == 0:
            quality = "failure"
        elif env.seeds_fossilized > 0:
            quality = "success"
        else:
            quality = "partial"
        twin = env.twin
        assert twin is not None, "datagen episodes always measure against a static twin"
        host = env.model.host_param_count
        trajectory = hashlib.sha256("|".join(
            f"{d['step_metadata']['state_hash']}:{d['action']['joint_index']}" for d in decisions).encode()).hexdigest()
        total = math.fsum(rewards)
        return {
            "decisions": decisions,
            "final_features": observation_features(final),
            "final_accuracy": env.accuracy_curve[-1],
            "best_accuracy": max(env.accuracy_curve),
            "final_gap": env.accuracy_curve[-1] - twin.accuracy_curve[-1],
            "final_param_ratio": env.model.seed_param_count_total / host,
            "host_params": host,
            "total_seeds_created": env.seeds_created,
            "total_seeds_fossilized": env.seeds_fossilized,
            "total_seeds_culled": env.seeds_culled,
            "final_seed_params": env.model.seed_param_count_total,
            "final_seed_stages": {slot: (r.stage.name if (r := final.slot_reports.get(slot)) is not None else None)
                                  for slot in final.enabled_slots},
            "action_counts": counts,
            "reward_family": self.stored_family,
            "reward_gamma": self.gamma,
            "total_return": total,
            "return_to_go_at_start": total,
            "episode_length": len(decisions),
            "termination_reason": "diverged" if rolled_back else "max_epochs",
            "done": True,
            "truncated": False,
            "num_interventions": sum(1 for op in ops if op != "WAIT"),
            "trajectory_quality": quality,
            "trajectory_hash": trajectory,
            "rollbacks": env.rollbacks,
        }


def feature_schema(space: ActionSpace) -> dict[str, Any]:
    """What the features are, and the blueprint head that sizes them and the joint actions: readers reject episodes
    whose features mean something else."""
    names = feature_names(space)
    return {"name": FEATURE_SCHEMA_NAME, "dim": len(names), "names": list(names), "blueprints": list(space.head)}
