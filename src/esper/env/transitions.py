"""From live envs to transitions: what an epoch measured, a decision waiting for its outcome, a completed step.

A decision made after epoch e is credited with epoch e + 1's measurements, so it waits as a `PendingDecision` for
one epoch and then becomes an `EnvStep` (its `StepRecord` and reward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from esper.env.logs import SlotSummary, StepRow
from esper.env.masks import build_slot_states
from esper.env.step_record import Measurement, ShapedRewardComponents, SlotRewardInfo, StepRecord
from esper.leyline import EnvObservation, SeedStage
from esper.tamiyo import TamiyoDecision
from esper.tolaria import TrainEpochStats, ValStats

if TYPE_CHECKING:
    from esper.env.env import MorphoEnv

__all__ = ["EnvStep", "PendingDecision", "measure"]


@dataclass(frozen=True)
class PendingDecision:
    """A decision taken after epoch `observation.epoch`, with what it saw, until the next epoch is measured."""

    observation: EnvObservation
    decision: TamiyoDecision
    action_success: bool
    before: Measurement
    slots: dict[str, SlotSummary | None]
    train: TrainEpochStats
    val: ValStats


@dataclass
class EnvStep:
    """One completed transition of one env: the decision after `epoch` and the reward its outcome earned."""

    env: MorphoEnv
    epoch: int
    observation: EnvObservation
    decision: TamiyoDecision
    action_success: bool
    record: StepRecord
    reward: ShapedRewardComponents
    train: TrainEpochStats
    val: ValStats
    slots: dict[str, SlotSummary | None]

    @property
    def rollback(self) -> bool:
        return self.record.rollback

    def row(self) -> StepRow:
        """This step as a line of steps.jsonl: the decision, what the env looked like when it was made, the reward."""
        env, cmd = self.env, self.decision.command
        return StepRow(
            batch=env.spec.batch, env=env.env_id, episode=env.spec.episode, epoch=self.epoch,
            controller=env.controller_name, op=cmd.op.name, slot=cmd.slot_id, blueprint=cmd.blueprint_id,
            blend=cmd.blend_id, success=self.action_success, reason=self.decision.reason,
            train_loss=self.train.train_loss, train_acc=self.train.train_accuracy, val_loss=self.val.val_loss,
            val_acc=self.val.val_accuracy, rollback=self.rollback, slots=self.slots,
            seed_params=self.record.before.seed_param_count_total, reward_components=self.reward.to_dict(),
            reward=self.reward.total(),
        )


def _slot_reward_info(env: MorphoEnv, obs: EnvObservation) -> dict[str, SlotRewardInfo | None]:
    info: dict[str, SlotRewardInfo | None] = {}
    states = build_slot_states(obs.slot_reports, obs.enabled_slots, env.spec.task.lifecycle.min_fossilize_contribution)
    for slot, mask_info in states.items():
        r = obs.slot_reports.get(slot)
        if r is None or mask_info is None:
            info[slot] = None
            continue
        info[slot] = SlotRewardInfo(
            stage=int(r.stage), epochs_in_stage=r.metrics.epochs_in_current_stage,
            seed_age_epochs=r.metrics.epochs_total, total_improvement=r.metrics.total_improvement,
            counterfactual=r.metrics.counterfactual_contribution,
            acc_at_germination=env.acc_at_germination.get(slot), fossilize_ready=mask_info.fossilize_ready,
        )
    return info


def measure(env: MorphoEnv, obs: EnvObservation) -> Measurement:
    """The env's measurement of the epoch it just observed, with its twin's (which has measured the same epoch)."""
    model, m = env.model, obs.signals.metrics
    present = [s for s in model.slots() if s.state is not None]
    twin = env.twin
    return Measurement(
        epoch=obs.epoch, val_acc=m.val_accuracy, val_loss=m.val_loss, acc_delta=m.accuracy_delta,
        loss_delta=m.loss_delta, slots=_slot_reward_info(env, obs), snapshot=model.lifecycle_snapshot(),
        seed_param_counts=tuple((s.state.metrics.epochs_total, s.seed_param_count)
                                for s in present if s.state is not None),
        host_param_count=model.host_param_count,
        fossilized_contributing=sum(
            1 for s in present if s.state is not None and s.state.stage == SeedStage.FOSSILIZED
            and env.fossil_improvement.get(s.slot_id, 0.0) >= 1.0),
        best_val_acc=max(env.accuracy_curve, default=0.0),
        twin_val_acc=None if twin is None else twin.accuracy_curve[obs.epoch - 1],
        twin_val_loss=None if twin is None else twin.loss_curve[obs.epoch - 1],
    )
