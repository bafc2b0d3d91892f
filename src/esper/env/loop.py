"""The epoch loop shared by every controller: `run_epoch` advances all envs of a call by one RL step, batch-first.

Order per epoch: train pass, validation pass with counterfactuals, governor, seed bookkeeping,
observation, decision, execution, lifecycle step, reward and record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from esper.env.env import EnvStep, MorphoEnv
from esper.env.logs import EpisodeResult, slot_summaries
from esper.env.rewards import RewardFn
from esper.leyline import EnvObservation, LifecycleOp, TelemetryEventType
from esper.leyline.seeding import derive_seed
from esper.runtime.data import SharedBatchIterator
from esper.runtime.tasks import DataCache, TaskSpec
from esper.tamiyo import BatchTamiyoPolicy, TamiyoDecision, TamiyoPolicy, check_decision
from esper.tolaria import counterfactual_slots

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
        """Iterators over device-resident data: each batch is materialized once per device, for every env on it."""
        keys = sorted({str(d) for d in devices})
        train = {k: cache.get(task, "train", k, max_train_samples) for k in keys}
        val = {k: cache.get(task, "val", k, max_val_samples) for k in keys}
        return cls(SharedBatchIterator(train, batch_size, shuffle=True, seed=seed, augment=task.augment),
                   SharedBatchIterator(val, task.val_batch_size, shuffle=False), seed)


def decide_all(envs: Sequence[MorphoEnv], controllers: Sequence[TamiyoPolicy],
               observations: Sequence[EnvObservation]) -> list[TamiyoDecision]:
    """One decision per env; a controller shared by several envs decides for all of them in one batch."""
    decisions: list[TamiyoDecision | None] = [None] * len(envs)
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
            check_decision(decision, observations[i])
            decisions[i] = decision
    return [d for d in decisions if d is not None]


def run_epoch(envs: Sequence[MorphoEnv], controllers: Sequence[TamiyoPolicy], data: EpochData, epoch: int,
              reward_fn: RewardFn) -> list[EnvStep]:
    """Advance every env by one epoch (one RL step) and return what happened in each."""
    for env in envs:
        env._epoch_start = time.perf_counter()
    data.train.set_seed(derive_seed(data.seed, epoch))
    last = len(data.train) - 1
    for b, batch in enumerate(data.train):
        for env in envs:
            x, y = batch[env.device_key]
            env.train_batch(x, y, collect_gradients=b == last)
    for env in envs:
        env.finish_train_pass()
    ablations = [counterfactual_slots(env.model) for env in envs]
    for batch in data.val:
        for env, ablate in zip(envs, ablations, strict=True):
            x, y = batch[env.device_key]
            env.validate_batch(x, y, ablate)
    for env in envs:
        if env.ts.stream is not None:
            env.ts.stream.synchronize()

    measured = [env.finish_measurements(epoch, ablate) for env, ablate in zip(envs, ablations, strict=True)]
    observations = []
    for env, (train, val, _) in zip(envs, measured, strict=True):
        env.accuracy_curve.append(val.val_accuracy)
        observations.append(env.observe(epoch, train, val, len(data.train)))
    decisions = decide_all(envs, controllers, observations)

    steps = []
    for env, obs, decision, (train, val, rollback) in zip(envs, observations, decisions, measured, strict=True):
        pre_action = env.slot_reward_info(obs)
        success = env.execute(decision.command, obs)
        changes = env.step_lifecycle(epoch)
        record = env.build_record(obs, pre_action, decision.command, success, rollback)
        reward = reward_fn(record)
        env.episode_reward += reward.total()
        step = EnvStep(env, epoch, obs, decision, success, record, reward, train, val, rollback, changes)
        _emit_step(step)
        steps.append(step)
    for sink in {id(env.spec.sink): env.spec.sink for env in envs if env.spec.sink is not None}.values():
        sink.tick()
    return steps


def _emit_step(step: EnvStep) -> None:
    env, cmd, obs = step.env, step.decision.command, step.observation
    op = cmd.op.name
    env.emit(TelemetryEventType.ACTION_TAKEN, step.epoch, f"{cmd.describe()} ({step.decision.reason})", {
        "op": op, "slot": cmd.slot_id, "blueprint": cmd.blueprint_id, "blend": cmd.blend_id,
        "success": step.action_success, "reason": step.decision.reason}, slot_id=cmd.slot_id,
        severity="debug" if cmd.op == LifecycleOp.WAIT else "info")  # the epoch line already says WAIT
    env.emit(TelemetryEventType.REWARD_COMPUTED, step.epoch, f"reward {step.reward.total():+.3f}",
             step.reward.to_dict())
    slots = {slot: None if s is None else {"stage": s.stage, "blueprint": s.blueprint, "alpha": s.alpha,
                                           "contribution": s.counterfactual}
             for slot, s in slot_summaries(env.model).items()}
    m = obs.signals.metrics
    env.emit(TelemetryEventType.EPOCH_COMPLETED, step.epoch, f"epoch {step.epoch}: val {m.val_accuracy:.2f}%", {
        "batch": env.spec.batch, "episode": env.spec.episode, "epoch": step.epoch, "max_epochs": env.spec.max_epochs,
        "train_loss": m.train_loss, "val_loss": m.val_loss, "train_accuracy": m.train_accuracy,
        "val_accuracy": m.val_accuracy, "slots": slots, "op": op, "slot": cmd.slot_id,
        "reward": step.reward.total(), "device": env.device_key, "rollback": step.rollback,
        "controller": env.controller_name})
    if step.record.is_terminal:
        r = env.result()
        env.emit(TelemetryEventType.EPISODE_COMPLETED, step.epoch, f"episode {r.episode} done: "
                 f"final {r.final_accuracy:.2f}%", {
                     "controller": r.controller, "episode": r.episode, "final_accuracy": r.final_accuracy,
                     "best_accuracy": r.best_accuracy, "seeds_created": r.seeds_created,
                     "seeds_fossilized": r.seeds_fossilized, "seeds_culled": r.seeds_culled,
                     "params_added": r.params_added, "total_reward": r.total_reward})


def run_episodes(envs: Sequence[MorphoEnv], controllers: Sequence[TamiyoPolicy], data: EpochData,
                 reward_fn: RewardFn, on_step: StepCallback | None = None,
                 should_stop: Callable[[], bool] | None = None) -> list[EpisodeResult]:
    """Run whole episodes (all envs in lock-step) and return one result per env.

    Callers reset their controllers first (each controller kind knows how its episode seed is derived).
    """
    if len(envs) != len(controllers):
        raise ValueError(f"{len(envs)} envs but {len(controllers)} controllers")
    max_epochs = {env.spec.max_epochs for env in envs}
    if len(max_epochs) != 1:
        raise ValueError(f"Envs advancing together must share max_epochs, got {sorted(max_epochs)}")
    for epoch in range(1, max_epochs.pop() + 1):
        steps = run_epoch(envs, controllers, data, epoch, reward_fn)
        if on_step is not None:
            on_step(steps)
        if should_stop is not None and should_stop():
            break
    return [env.result() for env in envs]
