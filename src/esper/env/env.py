"""MorphoEnv and the single epoch loop used by every command.

Every controller (static, random, heuristic, PPO, ...) runs through `run_epoch`, so gate-critical measurements
(gradient ratios, counterfactuals, seed gradient statistics) are always taken and all envs of a call advance
together, batch-first: each shared batch is materialized once per device and every env on that device trains on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from esper.env.gradients import GradientStats, SeedGradientCollector
from esper.env.logs import EpisodeResult, StepRow, slot_summaries
from esper.env.masks import build_slot_states
from esper.env.rewards import ShapedRewardComponents, SlotRewardInfo, StepRecord
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.slot import StageChange
from esper.leyline import (
    EnvObservation,
    LifecycleCommand,
    LifecycleOp,
    SeedStage,
    TelemetryEvent,
    TelemetryEventType,
    TelemetrySink,
    compute_action_validity,
)
from esper.leyline.constants import GOVERNOR_SNAPSHOT_INTERVAL
from esper.leyline.telemetry import Severity
from esper.runtime.tasks import TaskSpec
from esper.tamiyo import SignalTracker, TamiyoDecision
from esper.tolaria import (
    BN_RECALIBRATION_BATCHES,
    TolariaGovernor,
    TrainEpochStats,
    TrainState,
    ValStats,
    finish_train_epoch,
    finish_validation,
    recalibrate_batchnorm,
    train_step,
    validate_batch,
)


@dataclass(frozen=True)
class EnvSpec:
    """One episode's environment: task, enabled slots, seeds, device and labels used in telemetry and results."""

    task: TaskSpec
    slots: tuple[str, ...]
    max_epochs: int
    env_seed: int
    device: torch.device
    env_id: int = 0
    episode: int = 0
    batch: int = 0
    max_seeds: int | None = None  # None: as many as enabled slots
    amp: bool = False
    sink: TelemetrySink | None = None


@dataclass
class EnvStep:
    """Everything that happened in one env during one epoch (one RL step)."""

    env: MorphoEnv
    epoch: int
    observation: EnvObservation
    decision: TamiyoDecision
    action_success: bool
    record: StepRecord
    reward: ShapedRewardComponents
    train: TrainEpochStats
    val: ValStats
    rollback: bool
    changes: list[StageChange]

    def row(self) -> StepRow:
        """This step as a line of steps.jsonl."""
        env, cmd = self.env, self.decision.command
        return StepRow(
            batch=env.spec.batch, env=env.env_id, episode=env.spec.episode, epoch=self.epoch,
            controller=env.controller_name, op=cmd.op.name, slot=cmd.slot_id, blueprint=cmd.blueprint_id,
            blend=cmd.blend_id, success=self.action_success, reason=self.decision.reason,
            train_loss=self.train.train_loss, train_acc=self.train.train_accuracy, val_loss=self.val.val_loss,
            val_acc=self.val.val_accuracy, rollback=self.rollback, slots=slot_summaries(env.model),
            seed_params=env.model.seed_param_count_total, reward_components=self.reward.to_dict(),
            reward=self.reward.total(),
        )


class MorphoEnv:
    """One episode: a fresh host (initialized from the env seed), its trainer, tracker, governor and bookkeeping."""

    def __init__(self, spec: EnvSpec, controller_name: str) -> None:
        self.spec = spec
        self.controller_name = controller_name
        task = spec.task
        torch.manual_seed(spec.env_seed)  # identical env seeds give identical host initializations
        host = task.host_factory().to(spec.device)
        # The env's own RNG stream (seed initialization, dropout): envs advancing in lock-step must not draw from
        # each other's, or a controller's results would depend on which other controllers run beside it.
        self._rng = torch.get_rng_state()
        self._cuda_rng = torch.cuda.get_rng_state(spec.device) if spec.device.type == "cuda" else None
        self.model = MorphogeneticModel(host, slots=spec.slots, lifecycle=task.lifecycle, on_event=self._emit)
        stream = torch.cuda.Stream(spec.device) if spec.device.type == "cuda" else None
        self.ts = TrainState(self.model, task.host_optimizer, task.seed_optimizer, task.task_type, spec.device,
                             amp=spec.amp, stream=stream)
        self.tracker = SignalTracker(env_id=spec.env_id, sink=spec.sink)
        self.governor = TolariaGovernor(random_guess_loss=task.random_guess_loss, on_event=self._emit)
        self.collector = SeedGradientCollector()
        self.max_seeds = len(self.model.slot_ids) if spec.max_seeds is None else spec.max_seeds
        self.acc_at_germination: dict[str, float] = {}
        self.fossil_improvement: dict[str, float] = {}
        self.seeds_created = self.seeds_fossilized = self.seeds_culled = self.rollbacks = 0
        self.action_counts = {op.name: 0 for op in LifecycleOp}
        self.accuracy_curve: list[float] = []
        self.episode_reward = 0.0
        self.prev_snapshot = self.model.lifecycle_snapshot()
        self._grad_stats: dict[str, torch.Tensor] = {}
        self._recent_inputs: deque[torch.Tensor] = deque(maxlen=BN_RECALIBRATION_BATCHES)
        self._epoch_start = 0.0
        self.governor.snapshot(self.ts, epoch=0, bookkeeping=self._bookkeeping())

    @property
    def env_id(self) -> int:
        return self.spec.env_id

    @property
    def device_key(self) -> str:
        return str(self.spec.device)

    def _emit(self, event: TelemetryEvent) -> None:
        sink = self.spec.sink
        if sink is not None and sink.wants(event.event_type):
            sink.emit(dataclasses.replace(event, env_id=self.env_id))

    def emit(self, event_type: TelemetryEventType, epoch: int, message: str, data: dict[str, Any],
             slot_id: str | None = None, severity: Severity = "info") -> None:
        sink = self.spec.sink
        if sink is not None and sink.wants(event_type):
            sink.emit(TelemetryEvent(event_type=event_type, env_id=self.env_id, epoch=epoch, slot_id=slot_id,
                                     message=message, data=data, severity=severity))

    @contextlib.contextmanager
    def _own_rng(self) -> Iterator[None]:
        """Swap the env's RNG state in for the duration of the block (and save where it got to)."""
        cpu, cuda = torch.get_rng_state(), None
        torch.set_rng_state(self._rng)
        if self._cuda_rng is not None:
            cuda = torch.cuda.get_rng_state(self.spec.device)
            torch.cuda.set_rng_state(self._cuda_rng, self.spec.device)
        try:
            yield
        finally:
            self._rng = torch.get_rng_state()
            torch.set_rng_state(cpu)
            if cuda is not None:
                self._cuda_rng = torch.cuda.get_rng_state(self.spec.device)
                torch.cuda.set_rng_state(cuda, self.spec.device)

    def _bookkeeping(self) -> dict[str, Any]:
        """Per-episode state a rollback must rewind with the model (seed ids stay unique: creations are not)."""
        return {"acc_at_germination": dict(self.acc_at_germination),
                "fossil_improvement": dict(self.fossil_improvement),
                "seeds_fossilized": self.seeds_fossilized, "seeds_culled": self.seeds_culled}

    # ------------------------------------------------------------------ per-batch work

    def train_batch(self, x: torch.Tensor, y: torch.Tensor, *, collect_gradients: bool) -> None:
        _claim_for_stream(self.ts.stream, x, y)
        with self.ts.stream_context(), self._own_rng():
            self.ts.post_backward_hooks = [self._collect_gradients] if collect_gradients else []
            train_step(self.ts, x, y)
        self._recent_inputs.append(x)

    def finish_train_pass(self) -> None:
        """Re-estimate normalization statistics at the final weights before validation (see Tolaria)."""
        with self.ts.stream_context():
            recalibrate_batchnorm(self.ts, self._recent_inputs)
        self._recent_inputs.clear()

    def _collect_gradients(self, ts: TrainState) -> None:
        """Post-backward hook on the epoch's last batch: seed gradient statistics, always on (telemetry + health)."""
        self._grad_stats = {s.slot_id: self.collector.collect_async(s.seed_parameters())
                            for s in self.model.slots() if s.state is not None}

    def validate_batch(self, x: torch.Tensor, y: torch.Tensor, ablate: tuple[str, ...]) -> None:
        _claim_for_stream(self.ts.stream, x, y)
        with self.ts.stream_context():
            validate_batch(self.ts, x, y, ablate)

    # ------------------------------------------------------------------ per-epoch work

    def finish_measurements(self, epoch: int, ablate: tuple[str, ...]
                            ) -> tuple[TrainEpochStats, ValStats, bool]:
        """Close the epoch's accumulators, consult the governor, and write the seed measurements."""
        train = finish_train_epoch(self.ts)
        val = finish_validation(self.ts) if self.ts._val else ValStats(0.0, 0.0, 0, {}, {})
        grad_stats = {slot: self.collector.materialize(t) for slot, t in self._grad_stats.items()}
        self._grad_stats = {}
        rollback = self.governor.check_vital_signs(val.val_loss)
        if rollback:
            report = self.governor.execute_rollback(self.ts)
            self.rollbacks += 1
            restored = report.restored_bookkeeping
            self.acc_at_germination = dict(restored["acc_at_germination"])
            self.fossil_improvement = dict(restored["fossil_improvement"])
            self.seeds_fossilized, self.seeds_culled = restored["seeds_fossilized"], restored["seeds_culled"]
            return train, val, True
        self.model.record_accuracy(val.val_accuracy)
        for slot in ablate:
            contribution = val.contribution[slot]
            self.model.slot(slot).set_counterfactual(contribution)
            self.emit(TelemetryEventType.COUNTERFACTUAL_COMPUTED, epoch, f"{slot} contributes {contribution:+.2f} pp", {
                "slot": slot, "real_accuracy": val.val_accuracy, "ablated_accuracy": val.ablated_accuracy[slot],
                "contribution": contribution}, slot_id=slot)
        for slot, ratio in train.gradient_ratios.items():
            self.model.slot(slot).update_gradient_ratio(ratio)
        for slot, stats in grad_stats.items():
            if stats["has_nonfinite"] and self.ts.scaler is not None:
                continue  # an fp16 overflow step (the scaler skips it): not a statement about seed health
            self._sync_slot(slot, stats, epoch)
        if epoch % GOVERNOR_SNAPSHOT_INTERVAL == 0:
            self.governor.snapshot(self.ts, epoch=epoch, bookkeeping=self._bookkeeping())
        return train, val, False

    def _sync_slot(self, slot: str, stats: GradientStats, epoch: int) -> None:
        s = self.model.slot(slot)
        if s.state is not None:
            s.sync_telemetry(dict(stats), epoch=epoch, max_epochs=self.spec.max_epochs)

    def observe(self, epoch: int, train: TrainEpochStats, val: ValStats, batches_per_epoch: int) -> EnvObservation:
        model, spec = self.model, self.spec
        reports = model.get_slot_reports()
        signals = self.tracker.update(
            epoch, epoch * batches_per_epoch, train.train_loss, train.train_accuracy, val.val_loss, val.val_accuracy,
            reports, [s for s in model.slot_ids if s not in reports], grad_norm_host=train.grad_norm_host,
            epoch_duration_ms=1000.0 * (time.perf_counter() - self._epoch_start),
        )
        validity = compute_action_validity(
            build_slot_states(reports, model.slot_ids, spec.task.lifecycle.min_fossilize_contribution),
            total_seeds=model.seeds_present(), max_seeds=self.max_seeds, topology=model.topology,
        )
        return EnvObservation(
            env_id=spec.env_id, epoch=epoch, max_epochs=spec.max_epochs, task=spec.task.name,
            topology=model.topology, enabled_slots=model.slot_ids, signals=signals, slot_reports=reports,
            validity=validity, host_param_count=model.host_param_count, total_param_count=model.total_params,
            seeds_present=model.seeds_present(), max_seeds=self.max_seeds,
            random_guess_loss=spec.task.random_guess_loss, batches_per_epoch=batches_per_epoch,
        )

    def execute(self, command: LifecycleCommand, obs: EnvObservation) -> bool:
        """Run a (validated) command; returns whether it took effect (a fossilize can still fail G5)."""
        epoch, slot = obs.epoch, command.slot_id
        self.action_counts[command.op.name] += 1
        success = True
        if command.op == LifecycleOp.GERMINATE:
            assert slot is not None and command.blueprint_id is not None and command.blend_id is not None
            self.seeds_created += 1
            with self._own_rng():
                self.model.germinate_seed(command.blueprint_id, f"env{self.env_id}_seed_{self.seeds_created}",
                                          slot=slot, blend_id=command.blend_id,
                                          baseline_accuracy=obs.signals.metrics.val_accuracy, epoch=epoch)
            self.acc_at_germination[slot] = obs.signals.metrics.val_accuracy
        elif command.op == LifecycleOp.FOSSILIZE:
            assert slot is not None
            improvement = obs.slot_reports[slot].metrics.total_improvement
            success = self.model.fossilize_seed(slot=slot, epoch=epoch).passed
            if success:
                self.seeds_fossilized += 1
                self.fossil_improvement[slot] = improvement
        elif command.op == LifecycleOp.CULL:
            assert slot is not None
            success = self.model.cull_seed(slot=slot, reason="controller", epoch=epoch)
            self.seeds_culled += int(success)
            self.acc_at_germination.pop(slot, None)
        self.ts.sync_optimizers()
        return success

    def step_lifecycle(self, epoch: int) -> list[StageChange]:
        changes = self.model.step_epoch(epoch)
        for change in changes:
            if change.new_stage == SeedStage.CULLED:
                self.seeds_culled += 1
                self.acc_at_germination.pop(change.slot, None)
        self.ts.sync_optimizers()
        return changes

    def slot_reward_info(self, obs: EnvObservation) -> dict[str, SlotRewardInfo | None]:
        """Pre-action per-slot facts the reward needs."""
        info: dict[str, SlotRewardInfo | None] = {}
        states = build_slot_states(obs.slot_reports, obs.enabled_slots,
                                   self.spec.task.lifecycle.min_fossilize_contribution)
        for slot, mask_info in states.items():
            r = obs.slot_reports.get(slot)
            if r is None or mask_info is None:
                info[slot] = None
                continue
            info[slot] = SlotRewardInfo(
                stage=int(r.stage), epochs_in_stage=r.metrics.epochs_in_current_stage,
                seed_age_epochs=r.metrics.epochs_total, total_improvement=r.metrics.total_improvement,
                counterfactual=r.metrics.counterfactual_contribution,
                acc_at_germination=self.acc_at_germination.get(slot), fossilize_ready=mask_info.fossilize_ready,
            )
        return info

    def build_record(self, obs: EnvObservation, pre_action: dict[str, SlotRewardInfo | None],
                     command: LifecycleCommand, success: bool, rollback: bool) -> StepRecord:
        model, metrics = self.model, obs.signals.metrics
        present = [s for s in model.slots() if s.state is not None]
        next_snapshot = model.lifecycle_snapshot()
        record = StepRecord(
            epoch=obs.epoch, max_epochs=self.spec.max_epochs, slots=pre_action, command=command,
            action_success=success, val_acc=metrics.val_accuracy, val_loss=metrics.val_loss,
            acc_delta=metrics.accuracy_delta, loss_delta=metrics.loss_delta,
            seed_param_counts=tuple((s.state.metrics.epochs_total, s.seed_param_count)
                                    for s in present if s.state is not None),
            host_param_count=model.host_param_count,
            fossilized_contributing=sum(
                1 for s in present if s.state is not None and s.state.stage == SeedStage.FOSSILIZED
                and self.fossil_improvement.get(s.slot_id, 0.0) >= 1.0),
            prev_snapshot=self.prev_snapshot, next_snapshot=next_snapshot,
            host_max_acc=max(self.accuracy_curve, default=0.0), is_terminal=obs.epoch == self.spec.max_epochs,
            rollback=rollback,
        )
        self.prev_snapshot = next_snapshot
        return record

    def result(self) -> EpisodeResult:
        spec = self.spec
        return EpisodeResult(
            controller=self.controller_name, env_id=spec.env_id, episode=spec.episode, batch=spec.batch,
            env_seed=spec.env_seed, final_accuracy=self.accuracy_curve[-1] if self.accuracy_curve else 0.0,
            best_accuracy=max(self.accuracy_curve, default=0.0), seeds_created=self.seeds_created,
            seeds_fossilized=self.seeds_fossilized, seeds_culled=self.seeds_culled,
            params_added=self.model.seed_param_count_total, action_counts=dict(self.action_counts),
            accuracy_curve=list(self.accuracy_curve), total_reward=self.episode_reward, rollbacks=self.rollbacks,
        )


def _claim_for_stream(stream: Any, *tensors: torch.Tensor) -> None:
    """Order an env stream after the stream that produced a shared batch (call outside the env's stream context)
    and keep the batch memory alive until the env stream is done with it."""
    if stream is None:
        return
    stream.wait_stream(torch.cuda.current_stream(stream.device))
    for t in tensors:
        t.record_stream(stream)
