"""train_ppo: PPO over vectorized, real morphogenetic training environments.

    esper train ppo --preset quick          # the command line parses, prints, and calls train_ppo(config, run)

One rollout batch b, read top to bottom in `_train` and `_collect`:
1. collect: re-seed everything from (seed, b); run min(n_envs, remaining) fresh episodes in lock-step (envs mapped
   round-robin over the devices, one shared data batch per device feeds every env on it; across a task family, each
   env group trains on a type of its own: `settings.TrainingSettings`). Per epoch the env pool yields every env's
   observation, the policy decides for all of them in one forward (a residual policy on top of each env's own
   teacher, built fresh for the batch), the `RolloutBuffer` stores the step in its [steps, envs] tensors, and the
   envs execute the decisions; the next epoch brings their rewards, normalized as they arrive;
2. update: advantages over the whole rollout (GAE per env, or leave-one-out within a group of envs), then
   `ppo_updates_per_batch` PPO updates, reverted if they leave a non-finite policy (a residual policy's first
   `critic_warmup_batches` fit its critic alone); then the observation normalizer is updated once, with the batch's
   raw features;
3. log: anomalies, the history row and the batch's events;
4. checkpoint: best, latest and final.
Because every batch derives its randomness from (seed, b) and the checkpoint holds all learner state, a resumed run
continues exactly.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from esper.data.batches import describe_augmentation
from esper.data.tasks import DataCache, DataOptions, TaskSpec, get_task_spec
from esper.env import EpisodeResult
from esper.env.driver import EnvPool
from esper.env.features import obs_dim
from esper.env.groups import GroupPlan, MemberPlan, TwinEnvPlan
from esper.env.rewards import SUMMED_FIELDS, needs_twin
from esper.execution.devices import env_device_map, resolve_device, resolve_devices
from esper.execution.workers import intra_op_threads
from esper.leyline import LifecycleOp, TelemetryEventType, TelemetrySink, emit_if_wanted
from esper.leyline.constants import ANOMALY_ESCALATION_EPOCHS
from esper.leyline.seeding import SeedStream, derive_seed
from esper.leyline.telemetry import Severity
from esper.simic.ppo.anomaly import AnomalyDetector, AnomalyReport, collect_per_layer_gradients
from esper.simic.ppo.buffer import RolloutBuffer
from esper.simic.ppo.checkpoint import (
    TRAINING_LABEL,
    PPOLearnerState,
    read_policy_checkpoint,
    resume_config,
    saved_config,
    seed_everything,
)
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.controller import PPOPolicy
from esper.simic.ppo.distill import DistillConfig, distill_from_iql
from esper.simic.ppo.history import PPOHistoryRow
from esper.simic.ppo.metrics import merge_updates
from esper.simic.ppo.settings import TrainingSettings
from esper.simic.ppo.teacher import Teachers
from esper.storage.rundir import RunDirectory

__all__ = ["PPORun", "PPOTrainingResult", "batch_seeds", "train_ppo"]

ROLLING_WINDOW = 10


@dataclass
class PPORun:
    """Everything `train_ppo` needs besides the config: where the run lives and how it reports.

    `resume_from` continues a checkpoint whose config equals `config` up to the resumable fields, in a run directory
    whose logs `checkpoint.trim_logs` has cut back to it.
    """

    run_dir: RunDirectory
    sink: TelemetrySink | None = None
    data: DataCache | None = None
    resume_from: Path | None = None
    should_stop: Callable[[], bool] | None = None
    progress: Callable[[str, int, int], None] | None = None  # (phase, done, total) of the phases without events

    def stopped(self) -> bool:
        return self.should_stop is not None and self.should_stop()

    def emit(self, event_type: TelemetryEventType, message: str, data: dict[str, Any], severity: Severity = "info"
             ) -> None:
        emit_if_wanted(self.sink, event_type, message, data, severity=severity)


@dataclass
class PPOTrainingResult:
    batches_completed: int
    episodes_completed: int
    best_rolling_accuracy: float
    history: list[PPOHistoryRow]


def train_ppo(config: TrainingConfig, run: PPORun) -> PPOTrainingResult:
    """Train the Tamiyo policy with PPO; returns what was completed (a stop request ends after the current step)."""
    settings = TrainingSettings.of(config)
    env_devices = resolve_devices(config.execution.device, config.execution.devices)
    cache = run.data if run.data is not None else DataCache(DataOptions())
    for task in settings.tasks:
        cache.preload(get_task_spec(task), env_devices)
    with EnvPool(config.execution, cache) as pool:  # from here on, every process uses execution.threads
        result = _train(config, run, settings, env_devices, pool)
    run.emit(TelemetryEventType.RUN_COMPLETED, "PPO training stopped" if run.stopped() else "PPO training finished",
             {"batches_completed": result.batches_completed, "episodes_completed": result.episodes_completed,
              "best_rolling_accuracy": result.best_rolling_accuracy})
    return result


def _train(config: TrainingConfig, run: PPORun, settings: TrainingSettings, env_devices: list[torch.device],
           pool: EnvPool) -> PPOTrainingResult:
    ppo, episode = config.ppo, config.episode
    task = get_task_spec(episode.task)
    warmup_batches = ppo.warmup_batches()
    n_batches = warmup_batches + math.ceil(ppo.n_episodes / ppo.n_envs)
    learner = PPOLearnerState.new(config, resolve_device(config.execution.device))
    if run.resume_from is not None:
        _resume(learner, config, run)
    else:
        if ppo.init_from is not None:
            source, result = distill_from_iql(learner, ppo.init_from, ppo.init_datasets, task, episode.slots,
                                              DistillConfig(seed=config.seed), progress=run.progress)
            run.emit(TelemetryEventType.CHECKPOINT_LOADED, f"actor distilled from {ppo.init_from}: greedy "
                     f"agreement {100 * result.agreement:.1f} % on {result.states} dataset states",
                     {"path": str(source), "kind": "distilled", "agreement": result.agreement,
                      "states": result.states, "final_loss": result.final_loss, "batch": 0})
        _checkpoint(learner, run, "init")  # the policy before any update: evaluations compare final with init
    policy = PPOPolicy(learner.agent, learner.obs_normalizer, use_telemetry=ppo.use_telemetry,
                       blueprints=config.blueprint_indices())
    detector = AnomalyDetector()
    _announce(config, task, settings, env_devices, n_batches, run)
    if run.progress is not None:  # (re)start the training phase's clock: a distillation before it is no training
        run.progress("training", learner.episodes_completed * episode.max_epochs,
                     ppo.total_episodes() * episode.max_epochs)

    history: list[PPOHistoryRow] = []
    saved_batches = learner.batches_completed
    report = AnomalyReport()
    try:
        while learner.batches_completed < n_batches and not run.stopped():
            b = learner.batches_completed
            started = time.perf_counter()
            batch = _collect(config, env_devices, learner, policy, pool, settings, run)
            if batch is None:  # interrupted mid-batch: the last checkpoint is the resume point
                break
            batch.seconds = time.perf_counter() - started

            update_started = time.perf_counter()
            returns, advantages = batch.rollout.advantages(ppo.advantage, config.reward.gamma, ppo.gae_lambda,
                                                           ppo.group_size)
            metrics = _update_policy(learner, batch.rollout, returns, advantages, ppo.ppo_updates_per_batch, run,
                                     gradient_stats=report.has_anomaly, critic_only=b < warmup_batches)
            learner.obs_normalizer.update(batch.rollout.raw.flatten(0, 1))
            update_seconds = time.perf_counter() - update_started

            learner.batches_completed += 1
            learner.episodes_completed += len(batch.results)
            previous_rolling, improved = _record_accuracy(learner, batch.results)
            report = detector.check_all(metrics.get("ratio_max", 1.0), metrics.get("ratio_min", 1.0),
                                        metrics.get("explained_variance", 1.0), bool(metrics.get("skipped_update")),
                                        learner.episodes_completed, ppo.total_episodes())
            row = _history_row(b, learner, batch, metrics, report, update_seconds, episode.max_epochs)
            history.append(row)
            _log_batch(row, metrics, report, previous_rolling, learner, n_batches, run)

            last = learner.batches_completed == n_batches
            if improved:
                _checkpoint(learner, run, "best")
            if learner.batches_completed % config.checkpoint_every == 0 or last:
                _checkpoint(learner, run, "latest")
                saved_batches = learner.batches_completed
            if last:
                _checkpoint(learner, run, "final")
    finally:
        if learner.batches_completed > saved_batches:  # stopped early or failed: keep every completed batch resumable
            _checkpoint(learner, run, "latest")
    return PPOTrainingResult(learner.batches_completed, learner.episodes_completed, learner.best_rolling_accuracy,
                             history)


@dataclass
class _Batch:
    """One collected rollout batch: the episodes' results, the rollout, the steps.jsonl rows and reward sums."""

    results: list[EpisodeResult]
    rollout: RolloutBuffer
    rows: list[dict[str, Any]] = field(default_factory=list)
    component_sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SUMMED_FIELDS, 0.0))
    batch_loads: int = 0
    seconds: float = 0.0


def _collect(config: TrainingConfig, env_devices: list[torch.device], learner: PPOLearnerState, policy: PPOPolicy,
             pool: EnvPool, settings: TrainingSettings, run: PPORun) -> _Batch | None:
    """Run one batch of episodes into a fresh rollout; None if a stop request cut it short (then nothing of the batch
    is written)."""
    b = learner.batches_completed
    ppo, episode = config.ppo, config.episode
    seed_everything(derive_seed(config.seed, SeedStream.TRAINING, b, "learner"))
    n_b = min(ppo.n_envs, ppo.total_episodes() - learner.episodes_completed)
    groups = _groups(config, settings, env_device_map(ppo.n_envs, env_devices), n_b, learner)
    agent = learner.agent
    if agent.network.residual:  # each env's teacher, fresh for its episode, on its group's host seed
        seeds = [g.seed for g in groups for _ in g.members]
        policy.teach(Teachers.for_training(ppo.teacher, get_task_spec(episode.task), episode.slots,
                                           episode.max_epochs, seeds, policy.blueprints))
    batch = _Batch([], RolloutBuffer(episode.max_epochs - 1, n_b, agent.state_dim, agent.space.num_blueprints,
                                     agent.device, residual=agent.network.residual))
    for m in pool.epochs(settings.base, groups, sink=run.sink):
        if m.steps:  # the rewards of the decisions taken after the previous epoch
            batch.rollout.credit(m.credited_step, [s.position for s in m.steps],
                                 [learner.reward_normalizer.update_and_normalize(s.reward.total()) for s in m.steps],
                                 [s.terminal for s in m.steps])
            for s in m.steps:
                batch.rows.append(s.row)
                for name in SUMMED_FIELDS:
                    batch.component_sums[name] += getattr(s.reward, name)
        if m.last:
            continue
        with intra_op_threads(1):  # a forward on a few dozen rows: idle threads would spin on the workers' cores
            step = policy.act(m.observations)
        batch.rollout.add(m.decision_step, step)
        pool.apply(step.decisions)
        if run.stopped():
            return None
    finished = pool.finish()
    for row in batch.rows:
        run.run_dir.append("steps.jsonl", row)
    for r in finished.results:
        run.run_dir.append("episodes.jsonl", r.to_dict())
    batch.results, batch.batch_loads = finished.results, finished.batch_loads
    return batch


def _update_policy(learner: PPOLearnerState, rollout: RolloutBuffer, returns: torch.Tensor, advantages: torch.Tensor,
                   updates: int, run: PPORun, *, gradient_stats: bool, critic_only: bool) -> dict[str, Any]:
    """`updates` PPO update calls on one rollout (stopping after an early stop), merged into one metrics dict;
    `critic_only`: a critic warm-up batch, whose updates fit the value function alone.

    An update that leaves non-finite policy parameters is reverted from an in-memory copy. `gradient_stats` (after
    an anomaly) emits per-layer policy gradient statistics even when the run is not at debug level.
    """
    agent = learner.agent
    before = copy.deepcopy((agent.network.state_dict(), agent.optimizer.state_dict()))
    train_steps = agent.train_steps
    runs: list[dict[str, Any]] = []
    for _ in range(updates):
        runs.append(agent.update(rollout, returns, advantages, critic_only=critic_only))
        if runs[-1].get("early_stopped"):
            break
    if not all(torch.isfinite(p).all() for p in agent.network.parameters()):
        agent.network.load_state_dict(before[0])
        agent.optimizer.load_state_dict(before[1])
        agent.train_steps = train_steps  # the entropy schedule does not advance on a reverted update
        run.emit(TelemetryEventType.NUMERICAL_INSTABILITY_DETECTED, "non-finite policy after update: reverted",
                 {"detail": "non-finite policy parameters", "diagnostic": None}, severity="warning")
        return {"skipped_update": 1.0, "updates_run": len(runs)}
    sink = run.sink
    if sink is not None and gradient_stats and not sink.wants(TelemetryEventType.GRADIENT_STATS):
        sink.escalate(1)  # the anomaly's escalation window has passed by now; reopen it for this report
    if sink is not None and sink.wants(TelemetryEventType.GRADIENT_STATS):
        run.emit(TelemetryEventType.GRADIENT_STATS, "policy gradient statistics",
                 {"layers": collect_per_layer_gradients(agent.network)})
    return merge_updates(runs)


# ----------------------------------------------------------------------------------------------------- the steps


def _resume(learner: PPOLearnerState, config: TrainingConfig, run: PPORun) -> None:
    assert run.resume_from is not None
    data = read_policy_checkpoint(run.resume_from)
    resume_config(saved_config(data, run.resume_from), config)  # raises on a non-resumable difference
    learner.restore(data, run.resume_from)
    run.emit(TelemetryEventType.CHECKPOINT_LOADED, f"resumed from {run.resume_from}",
             {"path": str(run.resume_from), "kind": "resume", "batch": learner.batches_completed})


def _announce(config: TrainingConfig, task: TaskSpec, settings: TrainingSettings, env_devices: list[torch.device],
              n_batches: int, run: PPORun) -> None:
    n_envs = config.ppo.n_envs
    device_of = env_device_map(n_envs, env_devices)
    run.emit(TelemetryEventType.TRAINING_STARTED, f"PPO on {task.name}: {n_envs} envs, {n_batches} batches", {
        "command": "train ppo", "task": task.name, "topology": task.topology, "n_envs": n_envs,
        "env_devices": {i: str(device_of[i]) for i in range(n_envs)}, "total_batches": n_batches,
        "n_episodes": config.ppo.total_episodes(), "obs_dim": obs_dim(task.action_space, config.ppo.use_telemetry),
        "config": config.to_dict(),
        "reward": settings.describe_reward(config.reward),
        "augmentation": describe_augmentation(task.augmentation(config.episode.augment)),
        "envs_per_device": {str(d): sum(1 for x in device_of if x == d) for d in env_devices}})


def batch_seeds(seed: int, batch: int, groups: int) -> tuple[list[int], int]:
    """The host seed of each env group of PPO batch `batch` and the batch's data seed, from the training seed stream
    (which selection and evaluation episodes never draw from)."""
    return ([derive_seed(seed, SeedStream.TRAINING, batch, g) for g in range(groups)],
            derive_seed(seed, SeedStream.TRAINING, batch, "data"))


def _groups(config: TrainingConfig, settings: TrainingSettings, device_of: list[torch.device], n_b: int,
            learner: PPOLearnerState) -> list[GroupPlan]:
    """`n_b` envs in groups of `group_size`: a group shares one host seed (and one static twin when the reward
    compares with it), so its members differ only in the actions their policy sampled. Every group of a batch trains
    on the batch's data subset and order; across a family, each group on its own and on the type it draws."""
    b, k = learner.batches_completed, config.ppo.group_size
    host_seeds, data_seed = batch_seeds(config.seed, b, n_b // k)
    data_seeds = settings.data_seeds(config.seed, b, n_b // k, data_seed)
    twin = needs_twin(config.reward.reward_family)
    return [GroupPlan(
        seed=host_seeds[g], data_seed=data_seeds[g], batch=b, recipe=settings.of_group(data_seeds[g]),
        members=tuple(MemberPlan(i, TRAINING_LABEL, str(device_of[i]), episode=learner.episodes_completed + i)
                      for i in range(g * k, (g + 1) * k)),
        twin=TwinEnvPlan(n_b + g, str(device_of[g * k])) if twin else None)
        for g in range(n_b // k)]


def _record_accuracy(learner: PPOLearnerState, results: list[EpisodeResult]) -> tuple[float, bool]:
    """Add the batch's mean final accuracy to the rolling window; returns (previous rolling accuracy, improved)."""
    previous = learner.rolling_accuracy
    batch_accuracy = sum(r.final_accuracy for r in results) / len(results)
    learner.rolling_window = [*learner.rolling_window, batch_accuracy][-ROLLING_WINDOW:]
    improved = learner.rolling_accuracy > learner.best_rolling_accuracy
    if improved:
        learner.best_rolling_accuracy = learner.rolling_accuracy
    return previous, improved


def _history_row(batch: int, learner: PPOLearnerState, collected: _Batch, metrics: dict[str, Any],
                 report: AnomalyReport, update_seconds: float, max_epochs: int) -> PPOHistoryRow:
    results = collected.results
    n_b = len(results)
    action_totals = {op.name: sum(r.action_counts[op.name] for r in results) for op in LifecycleOp}
    n_actions = max(1, sum(action_totals.values()))
    return PPOHistoryRow(
        batch=batch, episodes_completed=learner.episodes_completed, n_envs=n_b,
        avg_accuracy=learner.rolling_window[-1], rolling_accuracy=learner.rolling_accuracy,
        best_rolling_accuracy=learner.best_rolling_accuracy, env_accuracies=[r.final_accuracy for r in results],
        avg_reward=sum(r.total_reward for r in results) / n_b,
        action_shares={op: n / n_actions for op, n in action_totals.items()},
        reward_components={k: total / len(collected.rows) for k, total in collected.component_sums.items()},
        seeds_created=sum(r.seeds_created for r in results),
        seeds_fossilized=sum(r.seeds_fossilized for r in results),
        seeds_culled=sum(r.seeds_culled for r in results), rollbacks=sum(r.rollbacks for r in results),
        anomalies=report.anomaly_types, rollout_seconds=collected.seconds, update_seconds=update_seconds,
        env_epochs_per_second=n_b * max_epochs / collected.seconds, batch_loads=collected.batch_loads,
        **{k: v for k, v in metrics.items() if k != "ratio_diagnostic"},
    )


def _log_batch(row: PPOHistoryRow, metrics: dict[str, Any], report: AnomalyReport, previous_rolling: float,
               learner: PPOLearnerState, n_batches: int, run: PPORun) -> None:
    b = row.batch
    for anomaly in report.anomaly_types:
        run.emit(TelemetryEventType[f"{anomaly.upper()}_DETECTED"], report.details[anomaly],
                 {"detail": report.details[anomaly], "batch": b, "episodes_completed": learner.episodes_completed,
                  "diagnostic": metrics.get("ratio_diagnostic")}, severity="warning")
    if report.has_anomaly and run.sink is not None:
        run.sink.escalate(ANOMALY_ESCALATION_EPOCHS)
    run.run_dir.append(PPOHistoryRow.FILE, row.to_dict())
    run.emit(TelemetryEventType.PPO_UPDATE_COMPLETED, f"batch {b}: PPO update",
             {**metrics, "batch": b, "episodes_completed": learner.episodes_completed})
    seconds = row.rollout_seconds + row.update_seconds
    run.emit(TelemetryEventType.BATCH_COMPLETED,
             f"batch {b + 1}/{n_batches}: acc {row.avg_accuracy:.2f}% rolling {row.rolling_accuracy:.2f}% "
             f"reward {row.avg_reward:+.2f} kl {metrics.get('approx_kl', 0.0):.4f} "
             f"entropy {metrics.get('entropy', 0.0):.3f} ({seconds:.0f}s)",
             {**row.to_dict(), "fps": row.env_epochs_per_second})
    if len(learner.rolling_window) < 2:
        return
    delta = learner.rolling_accuracy - previous_rolling
    data = {"rolling_delta": delta, "batch": b, "rolling_accuracy": learner.rolling_accuracy}
    if delta > 2.0:
        run.emit(TelemetryEventType.IMPROVEMENT_DETECTED, f"rolling accuracy +{delta:.2f} pp", data)
    elif delta < -2.0:
        run.emit(TelemetryEventType.DEGRADATION_DETECTED, f"rolling accuracy {delta:.2f} pp", data)
    elif abs(delta) < 0.5:
        run.emit(TelemetryEventType.PLATEAU_DETECTED, f"rolling accuracy flat ({delta:+.2f} pp)", data)


def _checkpoint(learner: PPOLearnerState, run: PPORun, kind: str) -> None:
    """Save `kind`.pt once the logs of every batch it counts are on the disk, so a crash never leaves a checkpoint
    past its logs (a resume could not rerun what they lost)."""
    run.run_dir.sync()
    path = run.run_dir.checkpoints / f"{kind}.pt"
    learner.save(path)
    run.emit(TelemetryEventType.CHECKPOINT_SAVED, f"saved {kind} checkpoint {path}",
             {"path": str(path), "kind": kind, "batch": learner.batches_completed})
