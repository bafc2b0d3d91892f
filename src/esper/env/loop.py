"""The epoch loop shared by every controller: `run_epoch` advances all envs of a call by one epoch, batch-first.

Order per epoch e: train pass, validation pass (with counterfactuals), governor and seed bookkeeping, observation;
then the decisions taken after epoch e − 1 are completed with e's measurements (their rewards); then, for e < T,
every env's controller decides and the decision is executed with the lifecycle step. Static twins train and validate
in the same passes but never decide. Each shared batch is materialized once per device for every env on it.

`run_epoch` is `measure_epoch` (everything up to the rewards) followed by `conclude_epoch` (the decisions, checked
against the validity rules, executed and reported), so a caller that receives its decisions from outside, one
action at a time, runs exactly the same epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from esper.env.env import EpochStats, MorphoEnv
from esper.env.logs import EpisodeResult, SlotSummary, StepRow, slot_summaries
from esper.env.rewards import RewardFn
from esper.env.step_record import Measurement, ShapedRewardComponents, StepRecord
from esper.leyline import EnvObservation, LifecycleOp, TelemetryEventType
from esper.leyline.seeding import derive_seed
from esper.runtime.data import SharedBatchIterator
from esper.runtime.tasks import DataCache, TaskSpec
from esper.tamiyo import BatchTamiyoPolicy, TamiyoDecision, TamiyoPolicy, check_decision
from esper.tolaria import TrainEpochStats, ValStats, counterfactual_slots, probe_slots


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


StepCallback = Callable[[list[EnvStep]], None]


@dataclass
class EpochData:
    """The shared train and validation iterators of a call, keyed by device string."""

    train: SharedBatchIterator[str]
    val: SharedBatchIterator[str]
    seed: int  # the data order of epoch e is drawn from derive_seed(seed, e)

    @classmethod
    def build(cls, task: TaskSpec, cache: DataCache, devices: Sequence[torch.device], *, batch_size: int, seed: int,
              max_train_samples: int | None = None, max_val_samples: int | None = None) -> EpochData:
        """Iterators over device-resident data: each batch is materialized once per device, for every env on it.
        Capped splits are the subsets `seed` draws, so the envs of one call share their samples."""
        keys = sorted({str(d) for d in devices})
        train = {k: cache.get(task, "train", k, max_train_samples, seed=seed) for k in keys}
        val = {k: cache.get(task, "val", k, max_val_samples, seed=seed) for k in keys}
        return cls(SharedBatchIterator(train, batch_size, shuffle=True, seed=seed, augment=task.augment),
                   SharedBatchIterator(val, task.val_batch_size, shuffle=False), seed)


def decide_all(controllers: Sequence[TamiyoPolicy], observations: Sequence[EnvObservation]) -> list[TamiyoDecision]:
    """One decision per env; a controller shared by several envs decides for all of them in one batch (the decisions
    are checked against the validity rules when `conclude_epoch` executes them)."""
    decisions: list[TamiyoDecision | None] = [None] * len(observations)
    groups: dict[int, list[int]] = {}
    for i, controller in enumerate(controllers):
        groups.setdefault(id(controller), []).append(i)
    for indices in groups.values():
        controller = controllers[indices[0]]
        obs = [observations[i] for i in indices]
        if isinstance(controller, BatchTamiyoPolicy):
            made = controller.decide_batch(obs)
        else:
            made = [controller.decide(o) for o in obs]
        for i, decision in zip(indices, made, strict=True):
            decisions[i] = decision
    return [d for d in decisions if d is not None]


def twins_of(envs: Sequence[MorphoEnv]) -> list[MorphoEnv]:
    """The distinct live static twins the envs shadow that are not among the envs themselves (a static env can
    serve as the twin of its peers), in order of first appearance. Stored twins are already trained."""
    members = {id(env) for env in envs}
    seen: dict[int, MorphoEnv] = {}
    for env in envs:
        if isinstance(env.twin, MorphoEnv) and id(env.twin) not in members:
            seen.setdefault(id(env.twin), env.twin)
    return list(seen.values())


@dataclass
class MeasuredEpoch:
    """An epoch trained, validated and observed, whose decisions are still to be made: the first half of
    `run_epoch`, which `conclude_epoch` finishes. Callers that get their decisions from outside the loop (the
    Gymnasium adapter, one action per `step`) run the halves separately."""

    envs: Sequence[MorphoEnv]
    epoch: int
    observations: list[EnvObservation]
    measurements: list[Measurement]
    stats: list[EpochStats]  # per env
    steps: list[EnvStep]  # the transitions this epoch completed (the decisions taken after the previous one)

    @property
    def last(self) -> bool:
        """The final epoch: nothing could follow a decision, so none is taken."""
        return self.epoch >= self.envs[0].spec.max_epochs


def measure_epoch(envs: Sequence[MorphoEnv], data: EpochData, epoch: int, reward_fn: RewardFn) -> MeasuredEpoch:
    """Train, validate and observe every env (and its twin) for one epoch, and credit the pending decisions."""
    trained = [*envs, *twins_of(envs)]
    for env in trained:
        env.start_epoch()
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
        if env.ts.stream is not None:
            env.ts.stream.synchronize()
    measured = [env.finish_measurements(epoch, ablate, probe)
                for env, ablate, probe in zip(trained, ablations, probes, strict=True)]
    measured = measured[:len(envs)]  # the twins' measurements only feed their envs' rewards

    observations, measurements = [], []
    for env, stats in zip(envs, measured, strict=True):
        obs = env.observe(epoch, stats.train, stats.val, len(data.train))
        observations.append(obs)
        measurements.append(env.measurement(obs))

    steps = []
    for env, measurement, stats in zip(envs, measurements, measured, strict=True):
        pending = env.pending
        record = env.complete(measurement, stats.rolled_back)
        if pending is None or record is None:
            continue
        reward = reward_fn(record)
        env.episode_reward += reward.total()
        step = EnvStep(env, record.epoch, pending.observation, pending.decision, pending.action_success, record,
                       reward, pending.train, pending.val, pending.slots)
        env.emit(TelemetryEventType.REWARD_COMPUTED, record.epoch, f"reward {reward.total():+.3f}", reward.to_dict())
        steps.append(step)
    return MeasuredEpoch(envs, epoch, observations, measurements, measured, steps)


def conclude_epoch(measured: MeasuredEpoch, decisions: Sequence[TamiyoDecision] | None) -> None:
    """Execute one decision per env (None after the last epoch, which takes none) with its lifecycle step, and
    report the epoch."""
    envs, epoch = measured.envs, measured.epoch
    if measured.last != (decisions is None):
        raise ValueError(f"Epoch {epoch} of {envs[0].spec.max_epochs}: decisions are taken after every epoch but "
                         f"the last, and only then")
    decided: list[TamiyoDecision | None] = [None] * len(envs)
    if decisions is not None:
        if len(decisions) != len(envs):
            raise ValueError(f"{len(decisions)} decisions for {len(envs)} envs")
        for i, made in enumerate(decisions):
            check_decision(made, measured.observations[i])
            stats = measured.stats[i]
            envs[i].act(made, measured.observations[i], measured.measurements[i], stats.train, stats.val)
            _emit_action(envs[i], epoch, made)
            decided[i] = made
    for env, obs, decision, stats in zip(envs, measured.observations, decided, measured.stats, strict=True):
        _emit_epoch(env, obs, decision, stats.rolled_back)
    for sink in {id(env.spec.sink): env.spec.sink for env in envs if env.spec.sink is not None}.values():
        sink.tick()


def run_epoch(envs: Sequence[MorphoEnv], controllers: Sequence[TamiyoPolicy], data: EpochData, epoch: int,
              reward_fn: RewardFn) -> list[EnvStep]:
    """Advance every env (and its twin) by one epoch; returns the transitions this epoch completed."""
    measured = measure_epoch(envs, data, epoch, reward_fn)
    conclude_epoch(measured, None if measured.last else decide_all(controllers, measured.observations))
    return measured.steps


def _emit_action(env: MorphoEnv, epoch: int, decision: TamiyoDecision) -> None:
    assert env.pending is not None
    cmd = decision.command
    env.emit(TelemetryEventType.ACTION_TAKEN, epoch, f"{cmd.describe()} ({decision.reason})", {
        "op": cmd.op.name, "slot": cmd.slot_id, "blueprint": cmd.blueprint_id, "blend": cmd.blend_id,
        "success": env.pending.action_success, "reason": decision.reason}, slot_id=cmd.slot_id,
        severity="debug" if cmd.op == LifecycleOp.WAIT else "info")  # the epoch line already says WAIT


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


def run_episodes(envs: Sequence[MorphoEnv], controllers: Sequence[TamiyoPolicy], data: EpochData,
                 reward_fn: RewardFn, on_step: StepCallback | None = None,
                 should_stop: Callable[[], bool] | None = None) -> list[EpisodeResult]:
    """Run whole episodes (all envs and their twins in lock-step) and return one result per env."""
    if len(envs) != len(controllers):
        raise ValueError(f"{len(envs)} envs but {len(controllers)} controllers")
    max_epochs = {env.spec.max_epochs for env in envs}
    if len(max_epochs) != 1:
        raise ValueError(f"Envs advancing together must share max_epochs, got {sorted(max_epochs)}")
    for epoch in range(1, max_epochs.pop() + 1):
        steps = run_epoch(envs, controllers, data, epoch, reward_fn)
        if on_step is not None and steps:
            on_step(steps)
        if should_stop is not None and should_stop():
            break
    return [env.result() for env in envs]
