"""MorphoEnv: one morphogenetic training episode as an environment.

An env owns a fresh host built from its seed, the seeds it grows, its trainer, tracker and governor, and the steps
an epoch is made of: train and validate batch by batch, close the epoch's measurements, observe, and from epoch 1 to
T − 1 execute one lifecycle decision. Those steps are valid in one order only, across many envs sharing their batches,
so one object calls them: `esper.env.lockstep.Lockstep`, which also holds each decision until the next epoch's
measurements credit it. An env may shadow a static twin: the same host, seed, optimizer and data, trained without
growth, so its accuracy gap to the twin is growth's. The twin is either a live env trained in the same `Lockstep` or
a `StoredTwin`, the curves of one trained earlier.
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

from esper.data.optim import LRSchedule, lr_factor
from esper.data.tasks import TaskSpec
from esper.env.gradients import GradientStats, SeedGradientCollector
from esper.env.logs import EpisodeResult
from esper.env.masks import build_slot_states
from esper.execution.readout import Deferred, Readout
from esper.kasmina.fixed import build_fixed_host
from esper.kasmina.model import MorphogeneticModel
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
from esper.leyline.seeding import derive_seed
from esper.leyline.telemetry import Severity, emit_if_wanted
from esper.tamiyo import SignalTracker
from esper.tolaria import (
    BN_RECALIBRATION_BATCHES,
    TolariaGovernor,
    TrainEpochStats,
    TrainState,
    ValStats,
    queue_train_epoch,
    queue_validation,
    recalibrate_batchnorm,
    train_step,
    validate_batch,
)
from esper.tolaria.flops import FlopMeter, recalibration_pass, train_pass, validation_pass


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
    host_width: float = 1.0  # channel / model-width multiplier of the host (static:<w> baselines)
    fixed_modules: tuple[tuple[str, str], ...] = ()  # (slot, blueprint) built into the host (fixed: baselines)
    lr_schedule: LRSchedule = "constant"  # how the learning rates of the episode's optimizers change per epoch


@dataclass(frozen=True)
class StoredTwin:
    """A static twin trained earlier, as its per-epoch validation curves (index e − 1 holds epoch e).

    A twin's trajectory depends only on its seed, optimizer and data, never on the envs it shadows, so episodes
    that run at different times on one seed (offline datasets) can share one twin computed once: the env reads its
    twin's measurement of each epoch from these curves, exactly as it would from a live twin's.
    """

    env_seed: int
    accuracy_curve: tuple[float, ...]
    loss_curve: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.accuracy_curve or len(self.accuracy_curve) != len(self.loss_curve):
            raise ValueError(f"A stored twin needs equal-length, non-empty curves, got {len(self.accuracy_curve)} "
                             f"accuracies and {len(self.loss_curve)} losses")

    @property
    def max_epochs(self) -> int:
        return len(self.accuracy_curve)


@dataclass(frozen=True)
class PendingMeasurements:
    """An epoch's measurements of one env, queued on the `Lockstep`'s readout: training and validation statistics,
    and per seed its gradient statistics and whether its parameters are finite."""

    train: Deferred[TrainEpochStats]
    val: Deferred[ValStats]
    slots: dict[str, Deferred[tuple[GradientStats, bool]]]


@dataclass(frozen=True)
class EpochStats:
    """What one epoch measured of one env: its training pass, its validation pass, whether the governor rolled it
    back (a rolled-back epoch's validation numbers are those that triggered the rollback)."""

    train: TrainEpochStats
    val: ValStats
    rolled_back: bool


class MorphoEnv:
    """One episode: a fresh host (initialized from the env seed), its trainer, tracker, governor and bookkeeping."""

    spec: EnvSpec
    twin: MorphoEnv | StoredTwin | None
    last_observation: EnvObservation | None  # the latest epoch's (after the last epoch: the episode's final state)

    def __init__(self, spec: EnvSpec, controller_name: str, twin: MorphoEnv | StoredTwin | None = None) -> None:
        if twin is not None and _twin_identity(twin) != (spec.env_seed, spec.max_epochs):
            raise ValueError(f"A static twin must share its envs' seed and episode length: twin "
                             f"{_twin_identity(twin)}, env {(spec.env_seed, spec.max_epochs)}")
        self.spec = spec
        self.controller_name = controller_name
        self.twin = twin
        task = spec.task
        # Identical env seeds give identical host initializations. The env then keeps its own RNG stream (dropout):
        # envs advancing in lock-step must not draw from each other's, or a controller's results would depend on
        # which other controllers run beside it. Building an env leaves the caller's generators untouched.
        with torch.random.fork_rng(devices=[spec.device] if spec.device.type == "cuda" else []):
            torch.manual_seed(spec.env_seed)
            host = task.host_factory(spec.host_width)
            if spec.fixed_modules:
                host = build_fixed_host(host, spec.fixed_modules, seed=spec.env_seed)
            host = host.to(spec.device)
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
        self.loss_curve: list[float] = []
        self.episode_reward = 0.0  # summed by the `Lockstep` as it credits the env's decisions
        self.last_observation = None
        self._grad_stats: dict[str, torch.Tensor] = {}
        self._recent_inputs: deque[torch.Tensor] = deque(maxlen=BN_RECALIBRATION_BATCHES)
        self.flops = FlopMeter()  # the env's own passes only: a live twin counts its own
        self.wall_seconds = 0.0  # time spent in the env's own passes (envs of a batch interleave, so not wall time)
        self.governor.snapshot(self.ts, epoch=0, bookkeeping=self._bookkeeping())

    @property
    def env_id(self) -> int:
        return self.spec.env_id

    @property
    def device_key(self) -> str:
        return str(self.spec.device)

    def _emit(self, event: TelemetryEvent) -> None:
        """A seed or governor event of this env's model, labelled with the env and its episode (paired episodes that
        run side by side share env ids)."""
        sink = self.spec.sink
        if sink is not None and sink.wants(event.event_type):
            sink.emit(dataclasses.replace(event, env_id=self.env_id,
                                          data={**event.data, "episode": self.spec.episode}))

    def emit(self, event_type: TelemetryEventType, epoch: int, message: str, data: dict[str, Any],
             slot_id: str | None = None, severity: Severity = "info") -> None:
        emit_if_wanted(self.spec.sink, event_type, message, data, severity=severity, env_id=self.env_id,
                       slot_id=slot_id, epoch=epoch)

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

    @contextlib.contextmanager
    def _seed_rng(self) -> Iterator[None]:
        """A stream of its own for each new seed's initialization, derived from (env seed, seed number).

        Germinating never advances the env's own stream, so an env whose seeds have not blended stays bit-identical
        to its static twin even on hosts that draw random numbers while training (dropout).
        """
        devices = [self.spec.device] if self.spec.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(derive_seed(self.spec.env_seed, "seed", self.seeds_created))
            yield

    def _bookkeeping(self) -> dict[str, Any]:
        """Per-episode state a rollback must rewind with the model (seed ids stay unique: creations are not)."""
        return {"acc_at_germination": dict(self.acc_at_germination),
                "fossil_improvement": dict(self.fossil_improvement),
                "seeds_fossilized": self.seeds_fossilized, "seeds_culled": self.seeds_culled}

    @contextlib.contextmanager
    def _clock(self) -> Iterator[None]:
        """Adds the block's duration to `wall_seconds`: the env's own cost, even while other envs of its batch run
        between its passes."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.wall_seconds += time.perf_counter() - start

    # ----------------------------------- the epoch's steps: only `esper.env.lockstep.Lockstep` calls them, in order

    def begin_epoch(self, epoch: int) -> None:
        """Set the optimizers' learning rates for `epoch` from the episode's schedule (constant: left as they are)."""
        if self.spec.lr_schedule != "constant":
            self.ts.set_lr_factor(lr_factor(self.spec.lr_schedule, epoch, self.spec.max_epochs))

    def train_batch(self, x: torch.Tensor, y: torch.Tensor, *, collect_gradients: bool) -> None:
        _claim_for_stream(self.ts.stream, x, y)
        with self._clock(), self.ts.stream_context(), self._own_rng(), self.flops.count(train_pass(self.model, x)):
            self.ts.post_backward_hooks = [self._collect_gradients] if collect_gradients else []
            train_step(self.ts, x, y)
        self._recent_inputs.append(x)

    def finish_train_pass(self) -> None:
        """Re-estimate normalization statistics at the final weights before validation (see Tolaria)."""
        with self._clock(), self.ts.stream_context(), \
                self.flops.count(recalibration_pass(self.model, self._recent_inputs)):
            recalibrate_batchnorm(self.ts, self._recent_inputs)
        self._recent_inputs.clear()

    def _collect_gradients(self, ts: TrainState) -> None:
        """Post-backward hook on the epoch's last batch: seed gradient statistics, always on (telemetry + health)."""
        self._grad_stats = {s.slot_id: self.collector.collect_async(s.seed_parameters())
                            for s in self.model.slots() if s.state is not None}

    def validate_batch(self, x: torch.Tensor, y: torch.Tensor, ablate: tuple[str, ...],
                       probe: tuple[str, ...]) -> None:
        _claim_for_stream(self.ts.stream, x, y)
        with self._clock(), self.ts.stream_context(), \
                self.flops.count(validation_pass(self.model, x, ablate, probe)):
            validate_batch(self.ts, x, y, ablate, probe)

    def wait_for_passes(self) -> None:
        """Order the caller's stream after the passes queued on the env's own stream (a no-op without one): the
        epoch's host read, governor snapshots and rollbacks run on the caller's stream after them (and the env's
        next passes wait for that stream in turn), and the host waits once for every env of the `Lockstep`."""
        if self.ts.stream is not None:
            torch.cuda.current_stream(self.spec.device).wait_stream(self.ts.stream)

    def queue_measurements(self, readout: Readout) -> PendingMeasurements:
        """Close the epoch's accumulators onto `readout` (nothing is read here): the training and validation
        statistics, and per seed its gradient statistics and whether its parameters are finite."""
        slots: dict[str, Deferred[tuple[GradientStats, bool]]] = {}
        for slot, gradients in self._grad_stats.items():
            finite = self.model.slot(slot).finite_parameters()
            # The flag's value follows the five gradient values; a seed without parameters has none (finite).
            slots[slot] = readout.queue([gradients, *([] if finite is None else [finite])],
                                        lambda v: (self.collector.summarize(v[:5]), all(v[5:])))
        self._grad_stats = {}
        return PendingMeasurements(queue_train_epoch(self.ts, readout), queue_validation(self.ts, readout), slots)

    def finish_measurements(self, epoch: int, pending: PendingMeasurements, ablate: tuple[str, ...],
                            probe: tuple[str, ...]) -> EpochStats:
        """From the read measurements: consult the governor and write the seed measurements."""
        train, val = pending.train.value, pending.val.value
        self.accuracy_curve.append(val.val_accuracy)
        self.loss_curve.append(val.val_loss)
        rollback = self.governor.check_vital_signs(val.val_loss)
        if rollback:
            report = self.governor.execute_rollback(self.ts)
            self.rollbacks += 1
            restored = report.restored_bookkeeping
            self.acc_at_germination = dict(restored["acc_at_germination"])
            self.fossil_improvement = dict(restored["fossil_improvement"])
            self.seeds_fossilized, self.seeds_culled = restored["seeds_fossilized"], restored["seeds_culled"]
            return EpochStats(train, val, rolled_back=True)
        self.model.record_accuracy(val.val_accuracy)
        for slot in ablate:
            contribution = val.contribution[slot]
            self.model.slot(slot).set_counterfactual(contribution)
            self.emit(TelemetryEventType.COUNTERFACTUAL_COMPUTED, epoch, f"{slot} contributes {contribution:+.2f} pp", {
                "slot": slot, "real_accuracy": val.val_accuracy, "ablated_accuracy": val.ablated_accuracy[slot],
                "contribution": contribution}, slot_id=slot)
        for slot in probe:
            self.model.slot(slot).set_probe_contribution(val.probe_contribution[slot])
        for slot, ratio in train.gradient_ratios.items():
            self.model.slot(slot).update_gradient_ratio(ratio)
        for slot, read in pending.slots.items():
            stats, finite_params = read.value
            if stats["has_nonfinite"] and self.ts.scaler is not None:
                continue  # an fp16 overflow step (the scaler skips it): not a statement about seed health
            seed = self.model.slot(slot)
            if seed.state is not None:
                seed.sync_telemetry(dict(stats), finite_params=finite_params, epoch=epoch,
                                    max_epochs=self.spec.max_epochs)
        if epoch % GOVERNOR_SNAPSHOT_INTERVAL == 0:
            self.governor.snapshot(self.ts, epoch=epoch, bookkeeping=self._bookkeeping())
        return EpochStats(train, val, rolled_back=False)

    def observe(self, epoch: int, stats: EpochStats, batches_per_epoch: int, epoch_seconds: float) -> EnvObservation:
        """The epoch as the controllers see it (the tracker's signals advance by one epoch)."""
        model, spec, train, val = self.model, self.spec, stats.train, stats.val
        reports = model.get_slot_reports()
        signals = self.tracker.update(
            epoch, epoch * batches_per_epoch, train.train_loss, train.train_accuracy, val.val_loss, val.val_accuracy,
            reports, [s for s in model.slot_ids if s not in reports], grad_norm_host=train.grad_norm_host,
            epoch_duration_ms=1000.0 * epoch_seconds,
        )
        validity = compute_action_validity(
            build_slot_states(reports, model.slot_ids, spec.task.lifecycle.min_fossilize_contribution),
            total_seeds=model.seeds_present(), max_seeds=self.max_seeds, space=model.action_space,
        )
        self.last_observation = EnvObservation(
            env_id=spec.env_id, epoch=epoch, max_epochs=spec.max_epochs, task=spec.task.name,
            topology=model.topology, enabled_slots=model.slot_ids, signals=signals, slot_reports=reports,
            validity=validity, host_param_count=model.host_param_count, total_param_count=model.total_params,
            seeds_present=model.seeds_present(), max_seeds=self.max_seeds,
            random_guess_loss=spec.task.random_guess_loss, batches_per_epoch=batches_per_epoch,
        )
        return self.last_observation

    def execute(self, command: LifecycleCommand, obs: EnvObservation) -> bool:
        """Run a (validated) command; returns whether it took effect (a fossilize can still fail G5)."""
        epoch, slot = obs.epoch, command.slot_id
        self.action_counts[command.op.name] += 1
        success = True
        if command.op == LifecycleOp.GERMINATE:
            assert slot is not None and command.blueprint_id is not None and command.blend_id is not None
            self.seeds_created += 1
            with self._seed_rng():
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

    def step_lifecycle(self, epoch: int) -> None:
        """The lifecycle's own step after the decision: alpha ramps, stage transitions, automatic culls."""
        for change in self.model.step_epoch(epoch):
            if change.new_stage == SeedStage.CULLED:
                self.seeds_culled += 1
                self.acc_at_germination.pop(change.slot, None)
        self.ts.sync_optimizers()

    def result(self) -> EpisodeResult:
        spec = self.spec
        return EpisodeResult(
            controller=self.controller_name, env_id=spec.env_id, episode=spec.episode, batch=spec.batch,
            env_seed=spec.env_seed, host_width=spec.host_width, host_params=self.model.host_param_count,
            final_accuracy=self.accuracy_curve[-1] if self.accuracy_curve else 0.0,
            final_loss=self.loss_curve[-1] if self.loss_curve else 0.0,
            twin_final_accuracy=None if self.twin is None or not self.twin.accuracy_curve
            else self.twin.accuracy_curve[-1],
            twin_final_loss=None if self.twin is None or not self.twin.loss_curve else self.twin.loss_curve[-1],
            best_accuracy=max(self.accuracy_curve, default=0.0), seeds_created=self.seeds_created,
            seeds_fossilized=self.seeds_fossilized, seeds_culled=self.seeds_culled,
            params_added=self.model.seed_param_count_total, action_counts=dict(self.action_counts),
            accuracy_curve=list(self.accuracy_curve), total_reward=self.episode_reward, rollbacks=self.rollbacks,
            train_flops=self.flops.total, wall_seconds=self.wall_seconds,
        )


def _twin_identity(twin: MorphoEnv | StoredTwin) -> tuple[int, int]:
    """(env seed, episode length): what a twin must share with the envs it shadows."""
    if isinstance(twin, StoredTwin):
        return twin.env_seed, twin.max_epochs
    return twin.spec.env_seed, twin.spec.max_epochs


def _claim_for_stream(stream: Any, *tensors: torch.Tensor) -> None:
    """Order an env stream after the stream that produced a shared batch (call outside the env's stream context)
    and keep the batch memory alive until the env stream is done with it."""
    if stream is None:
        return
    stream.wait_stream(torch.cuda.current_stream(stream.device))
    for t in tensors:
        t.record_stream(stream)
