"""`Lockstep`: envs advancing together through their episode, and the one place that knows the order of an epoch.

Every runner (`run_episodes`, the env hosts behind `EnvPool`, the Gymnasium adapter) drives its envs through a
`Lockstep`, and nothing else calls an env's epoch steps. For epoch e of T:

1. train pass: each shared batch (materialized once per device for every env on it) through every env and every
   live static twin the envs shadow;
2. normalization statistics re-estimated at the epoch's final weights;
3. validation pass, with the counterfactual and probe measurements;
4. governor and seed bookkeeping;
5. the observation, and the measurement rewards are computed from;
6. credit: the decisions taken after epoch e − 1 are paired with e's measurements into step records and rewards;
7. for e < T one decision per env, checked against the validity rules, executed with its lifecycle step, and kept
   until epoch e + 1 credits it; then the epoch is reported.

Steps 1–6 are `measure()` and step 7 is `apply(decisions)` (the numbering of docs/architecture.md). The decisions
are made between the two, outside: by the runner's controllers, in the learner's process when the envs live in
worker processes, or one action per `step` by a Gymnasium agent. Calls out of that order raise `EpochOrderError`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from esper.data.augment import Augment
from esper.data.batches import SharedBatchIterator
from esper.data.tasks import DataCache, TaskSpec
from esper.env.env import EpochStats, MorphoEnv
from esper.env.logs import SlotSummary, StepRow, slot_summaries
from esper.env.masks import build_slot_states
from esper.env.rewards import RewardFn
from esper.env.step_record import Measurement, ShapedRewardComponents, SlotRewardInfo, StepRecord
from esper.env.transitions import PendingDecision
from esper.execution.readout import Readout
from esper.leyline import EnvObservation, LifecycleOp, SeedStage, TelemetryEventType
from esper.leyline.seeding import derive_seed
from esper.tamiyo import TamiyoDecision, check_decision
from esper.tolaria import TrainEpochStats, ValStats, counterfactual_slots, probe_slots

__all__ = ["EnvStep", "EpochData", "EpochOrderError", "Lockstep", "MeasuredEpoch"]


class EpochOrderError(RuntimeError):
    """A `Lockstep` called out of its order: a fault of the calling code, never of user input."""


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
            train_loss=self.train.train_loss, train_accuracy=self.train.train_accuracy, val_loss=self.val.val_loss,
            val_accuracy=self.val.val_accuracy, rollback=self.rollback, slots=self.slots,
            seed_params=self.record.before.seed_param_count_total, reward_components=self.reward.to_dict(),
            reward=self.reward.total(),
        )


@dataclass
class EpochData:
    """The shared train and validation iterators of a call, keyed by device string."""

    train: SharedBatchIterator[str]
    val: SharedBatchIterator[str]
    seed: int  # the data order of epoch e is drawn from derive_seed(seed, e)

    @classmethod
    def build(cls, task: TaskSpec, cache: DataCache, devices: Sequence[torch.device], *, batch_size: int, seed: int,
              max_train_samples: int | None = None, max_val_samples: int | None = None,
              augment: Augment | None = None) -> EpochData:
        """Iterators over device-resident data: each batch is materialized once per device, for every env on it.
        Capped splits are the subsets `seed` draws, so the envs of one call share their samples. Training batches
        are augmented as `augment` says (None: as the task declares)."""
        keys = sorted({str(d) for d in devices})
        train = {k: cache.get(task, "train", k, max_train_samples, seed=seed) for k in keys}
        val = {k: cache.get(task, "val", k, max_val_samples, seed=seed) for k in keys}
        return cls(SharedBatchIterator(train, batch_size, shuffle=True, seed=seed, augment=task.augmentation(augment)),
                   SharedBatchIterator(val, task.val_batch_size, shuffle=False), seed)


@dataclass(frozen=True)
class MeasuredEpoch:
    """What `Lockstep.measure` returns: one entry per env, in env order, and the transitions the epoch completed."""

    epoch: int
    last: bool  # the final epoch: nothing could follow a decision, so none is taken after it
    observations: list[EnvObservation]
    measurements: list[Measurement]
    stats: list[EpochStats]
    steps: list[EnvStep]  # the decisions taken after the previous epoch, credited with this one


def twins_of(envs: Sequence[MorphoEnv]) -> list[MorphoEnv]:
    """The distinct live static twins the envs shadow that are not among the envs themselves (a static env can
    serve as the twin of its peers), in order of first appearance. Stored twins are already trained."""
    members = {id(env) for env in envs}
    seen: dict[int, MorphoEnv] = {}
    for env in envs:
        if isinstance(env.twin, MorphoEnv) and id(env.twin) not in members:
            seen.setdefault(id(env.twin), env.twin)
    return list(seen.values())


class Lockstep:
    """Envs sharing an episode length and a batch stream, with the live twins they shadow: `measure()` then
    `apply(decisions)`, once per epoch (see the module docstring). The decisions awaiting their credit live here."""

    def __init__(self, envs: Sequence[MorphoEnv], data: EpochData, reward_fn: RewardFn) -> None:
        max_epochs = {env.spec.max_epochs for env in envs}
        if len(max_epochs) != 1:
            raise ValueError(f"Envs advancing together must share max_epochs, got {sorted(max_epochs)}")
        self.envs = tuple(envs)
        self.data = data
        self.max_epochs = max_epochs.pop()
        self._reward_fn = reward_fn
        self._trained = (*self.envs, *twins_of(self.envs))  # the twins train beside the envs, never decide
        self._epoch = 0  # the last epoch measured
        self._measured: MeasuredEpoch | None = None  # measured, its decisions not yet applied
        self._pending: list[PendingDecision | None] = [None] * len(self.envs)

    def measure(self) -> MeasuredEpoch:
        """Train, validate and observe the next epoch, and credit the decisions taken after the previous one."""
        if self._measured is not None:
            raise EpochOrderError(f"Epoch {self._epoch} is measured and its decisions not applied: apply() before "
                                  f"measuring epoch {self._epoch + 1}")
        if self._epoch == self.max_epochs:
            raise EpochOrderError(f"The episode ended with epoch {self.max_epochs}: there is no epoch to measure")
        epoch = self._epoch + 1
        started = time.perf_counter()
        stats = self._train_and_validate(epoch)
        observations = [env.observe(epoch, s, len(self.data.train), time.perf_counter() - started)
                        for env, s in zip(self.envs, stats, strict=True)]
        measurements = [_measurement(env, obs) for env, obs in zip(self.envs, observations, strict=True)]
        steps = self._credit(measurements, stats)
        self._epoch = epoch
        self._measured = MeasuredEpoch(epoch, epoch == self.max_epochs, observations, measurements, stats, steps)
        return self._measured

    def apply(self, decisions: Sequence[TamiyoDecision] | None) -> None:
        """Execute one decision per env (None after the last epoch, which takes none) with its lifecycle step, and
        report the epoch."""
        measured = self._measured
        if measured is None:
            raise EpochOrderError(f"The episode ended with epoch {self.max_epochs}: there is nothing to apply"
                                  if self._epoch == self.max_epochs else
                                  f"Epoch {self._epoch + 1} is not measured yet: measure() before apply()")
        epoch = measured.epoch
        if measured.last != (decisions is None):
            raise ValueError(f"Epoch {epoch} of {self.max_epochs}: decisions are taken after every epoch but the "
                             f"last, and only then")
        if decisions is not None:
            if len(decisions) != len(self.envs):
                raise ValueError(f"{len(decisions)} decisions for {len(self.envs)} envs")
            for made, obs in zip(decisions, measured.observations, strict=True):
                check_decision(made, obs)
            for i, made in enumerate(decisions):
                self._pending[i] = self._execute(i, made, measured)
        for i, env in enumerate(self.envs):
            _emit_epoch(env, measured.observations[i], None if decisions is None else decisions[i],
                        measured.stats[i].rolled_back)
        for sink in {id(env.spec.sink): env.spec.sink for env in self.envs if env.spec.sink is not None}.values():
            sink.tick()
        self._measured = None

    def _train_and_validate(self, epoch: int) -> list[EpochStats]:
        """Steps 1 to 4 for every env and twin, batch-first; the epoch's measurements of all of them reach the host in
        one read (an accelerator's host waits once per epoch, not once per env and value); then each closes its
        epoch (the envs' stats only: the twins' measurements reach their envs through their curves)."""
        trained, data = self._trained, self.data
        for env in trained:
            env.begin_epoch(epoch)
        data.train.set_seed(derive_seed(data.seed, epoch))
        last = len(data.train) - 1
        for b, batch in enumerate(data.train):
            for env in trained:
                x, y = batch[env.device_key]
                env.train_batch(x, y, collect_gradients=b == last)
        for env in trained:
            env.finish_train_pass()
        ablations = [counterfactual_slots(env.model) for env in trained]
        probes = [probe_slots(env.model) for env in trained]
        for batch in data.val:
            for env, ablate, probe in zip(trained, ablations, probes, strict=True):
                x, y = batch[env.device_key]
                env.validate_batch(x, y, ablate, probe)
        for env in trained:
            env.wait_for_passes()
        readout = Readout()
        pending = [env.queue_measurements(readout) for env in trained]
        _read(readout, trained)
        stats = [env.finish_measurements(epoch, p, ablate, probe)
                 for env, p, ablate, probe in zip(trained, pending, ablations, probes, strict=True)]
        return stats[:len(self.envs)]

    def _credit(self, measurements: list[Measurement], stats: list[EpochStats]) -> list[EnvStep]:
        """Complete each pending decision with the epoch just measured: its step record and reward."""
        steps = []
        for i, (env, after, s) in enumerate(zip(self.envs, measurements, stats, strict=True)):
            pending, self._pending[i] = self._pending[i], None
            if pending is None:
                continue
            record = StepRecord(epoch=pending.observation.epoch, max_epochs=env.spec.max_epochs,
                                command=pending.decision.command, action_success=pending.action_success,
                                before=pending.before, after=after, rollback=s.rolled_back)
            reward = self._reward_fn(record)
            env.episode_reward += reward.total()
            env.emit(TelemetryEventType.REWARD_COMPUTED, record.epoch, f"reward {reward.total():+.3f}",
                     reward.to_dict())
            steps.append(EnvStep(env, record.epoch, pending.observation, pending.decision, pending.action_success,
                                 record, reward, pending.train, pending.val, pending.slots))
        return steps

    def _execute(self, i: int, decision: TamiyoDecision, measured: MeasuredEpoch) -> PendingDecision:
        """Env i executes a checked decision, then its lifecycle steps; the decision waits one epoch for its reward."""
        env, obs, stats = self.envs[i], measured.observations[i], measured.stats[i]
        slots = slot_summaries(env.model)  # as they were during the measured epoch
        success = env.execute(decision.command, obs)
        env.step_lifecycle(obs.epoch)
        cmd = decision.command
        env.emit(TelemetryEventType.ACTION_TAKEN, obs.epoch, f"{cmd.describe()} ({decision.reason})", {
            "op": cmd.op.name, "slot": cmd.slot_id, "blueprint": cmd.blueprint_id, "blend": cmd.blend_id,
            "success": success, "reason": decision.reason}, slot_id=cmd.slot_id,
            severity="debug" if cmd.op == LifecycleOp.WAIT else "info")  # the epoch line already says WAIT
        return PendingDecision(obs, decision, success, measured.measurements[i], slots, stats.train, stats.val)


def _read(readout: Readout, envs: Sequence[MorphoEnv]) -> None:
    """Read the epoch's measurements; on an accelerator this is where the host waits for the queued passes, so each
    env's `wall_seconds` takes an equal share of the wait."""
    started = time.perf_counter()
    readout.read()
    share = (time.perf_counter() - started) / len(envs)
    for env in envs:
        env.wall_seconds += share


def _measurement(env: MorphoEnv, obs: EnvObservation) -> Measurement:
    """The env's measurement of the epoch it just observed, with its twin's (which has measured the same epoch: a live
    twin trains in the same `Lockstep`, so its FLOP count has reached the end of this epoch too)."""
    model, m, twin = env.model, obs.signals.metrics, env.twin
    present = [s for s in model.slots() if s.state is not None]
    return Measurement(
        epoch=obs.epoch, val_accuracy=m.val_accuracy, val_loss=m.val_loss, acc_delta=m.accuracy_delta,
        loss_delta=m.loss_delta, slots=_slot_reward_info(env, obs), snapshot=model.lifecycle_snapshot(),
        seed_param_counts=tuple((s.state.metrics.epochs_total, s.seed_param_count)
                                for s in present if s.state is not None),
        host_param_count=model.host_param_count,
        fossilized_contributing=sum(
            1 for s in present if s.state is not None and s.state.stage == SeedStage.FOSSILIZED
            and env.fossil_improvement.get(s.slot_id, 0.0) >= 1.0),
        best_val_accuracy=max(env.accuracy_curve, default=0.0),
        twin_val_accuracy=None if twin is None else twin.accuracy_curve[obs.epoch - 1],
        twin_val_loss=None if twin is None else twin.loss_curve[obs.epoch - 1],
        train_flops=env.flops.total,
        twin_train_flops=twin.flops.total if isinstance(twin, MorphoEnv) else None,
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


def _emit_epoch(env: MorphoEnv, obs: EnvObservation, decision: TamiyoDecision | None, rollback: bool) -> None:
    m, spec = obs.signals.metrics, env.spec
    slots = {slot: None if s is None else {"stage": s.stage, "blueprint": s.blueprint, "alpha": s.alpha,
                                           "contribution": s.counterfactual}
             for slot, s in slot_summaries(env.model).items()}
    cmd = None if decision is None else decision.command
    env.emit(TelemetryEventType.EPOCH_COMPLETED, obs.epoch, f"epoch {obs.epoch}: val {m.val_accuracy:.2f}%", {
        "batch": spec.batch, "episode": spec.episode, "epoch": obs.epoch, "max_epochs": spec.max_epochs,
        "train_loss": m.train_loss, "val_loss": m.val_loss, "train_accuracy": m.train_accuracy,
        "val_accuracy": m.val_accuracy, "slots": slots, "op": None if cmd is None else cmd.op.name,
        "slot": None if cmd is None else cmd.slot_id, "reward": env.episode_reward, "device": env.device_key,
        "rollback": rollback, "controller": env.controller_name,
        "seed_params": obs.total_param_count - obs.host_param_count})
    if obs.epoch == spec.max_epochs:
        r = env.result()
        env.emit(TelemetryEventType.EPISODE_COMPLETED, obs.epoch, f"episode {r.episode} done: "
                 f"final {r.final_accuracy:.2f}%", {
                     "controller": r.controller, "episode": r.episode, "final_accuracy": r.final_accuracy,
                     "best_accuracy": r.best_accuracy, "seeds_created": r.seeds_created,
                     "seeds_fossilized": r.seeds_fossilized, "seeds_culled": r.seeds_culled,
                     "params_added": r.params_added, "total_reward": r.total_reward})
