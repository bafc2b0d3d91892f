"""train_ppo_vectorized: PPO over vectorized, real morphogenetic training environments (DESIGN §6.10).

Per rollout batch b: re-seed everything from (seed, b); create min(n_envs, remaining) envs mapped round-robin over
the devices; run `max_epochs` epochs batch-first (one shared batch per device feeds every env on it) with one batched
policy forward per epoch; store normalized rewards; run `ppo_updates_per_batch` PPO updates; update the observation
normalizer once; check anomalies; log; checkpoint. Because every batch derives its randomness from (seed, b) and the
checkpoint holds all learner state, rerunning with --resume continues exactly.
"""

from __future__ import annotations

import copy
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from esper.env.env import EnvSpec, EnvStep, MorphoEnv
from esper.env.features import obs_dim
from esper.env.logs import step_row
from esper.env.loop import EpochData, run_episodes
from esper.env.rewards import SUMMED_FIELDS, RewardFamily, SparseRewardConfig, make_reward_fn
from esper.leyline import LifecycleOp, TelemetryEvent, TelemetryEventType, TelemetryLevel, TelemetrySink
from esper.leyline.constants import ANOMALY_ESCALATION_EPOCHS
from esper.leyline.seeding import derive_seed
from esper.runtime.devices import env_device_map, resolve_device, resolve_devices
from esper.runtime.rundir import RunDirectory
from esper.runtime.tasks import DataCache, DataOptions, get_task_spec
from esper.simic.normalization import RewardNormalizer, RunningMeanStd
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.anomaly import AnomalyDetector, collect_per_layer_gradients
from esper.simic.ppo.checkpoint import RESUMABLE_FIELDS, LearnerState, load_learner, save_learner, trim_logs
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.controller import PPOController

ROLLING_WINDOW = 10


@dataclass
class PPOTrainingResult:
    batches_completed: int
    episodes_completed: int
    best_rolling_accuracy: float
    history: list[dict[str, Any]]


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _emit(sink: TelemetrySink | None, event_type: TelemetryEventType, message: str, data: dict[str, Any],
          severity: str = "info") -> None:
    if sink is not None and sink.wants(event_type):
        sink.emit(TelemetryEvent(event_type, message=message, data=data, severity=severity))  # type: ignore[arg-type]


def train_ppo_vectorized(
    *, task: str, slots: list[str], max_seeds: int | None, max_epochs: int, batch_size: int,
    max_train_samples: int | None, max_val_samples: int | None, n_episodes: int, n_envs: int, seed: int,
    device: str, devices: list[str] | None, amp: bool, checkpoint_every: int, lr: float, gamma: float,
    gae_lambda: float, clip_ratio: float, value_coef: float, value_clip: float | None, max_grad_norm: float,
    n_epochs: int, minibatch_size: int, target_kl: float | None, ppo_updates_per_batch: int, entropy_coef: float,
    entropy_coef_min: float, entropy_anneal_episodes: int, hidden_dim: int, use_telemetry: bool,
    reward_family: RewardFamily | str, param_budget: int, param_penalty_weight: float, sparse_reward_scale: float,
    run_dir: RunDirectory, sink: TelemetrySink | None = None, resume_path: Path | None = None,
    data_cache: DataCache | None = None, preset: str | None = None, argv: list[str] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> PPOTrainingResult:
    """Train the Tamiyo policy; every keyword of `TrainingConfig` is a parameter (the config surface is honest)."""
    config = TrainingConfig(
        task=task, slots=slots, max_seeds=max_seeds, max_epochs=max_epochs, batch_size=batch_size,
        max_train_samples=max_train_samples, max_val_samples=max_val_samples, n_episodes=n_episodes, n_envs=n_envs,
        seed=seed, device=device, devices=devices, amp=amp, checkpoint_every=checkpoint_every, lr=lr, gamma=gamma,
        gae_lambda=gae_lambda, clip_ratio=clip_ratio, value_coef=value_coef, value_clip=value_clip,
        max_grad_norm=max_grad_norm, n_epochs=n_epochs, minibatch_size=minibatch_size, target_kl=target_kl,
        ppo_updates_per_batch=ppo_updates_per_batch, entropy_coef=entropy_coef, entropy_coef_min=entropy_coef_min,
        entropy_anneal_episodes=entropy_anneal_episodes, hidden_dim=hidden_dim, use_telemetry=use_telemetry,
        reward_family=RewardFamily(reward_family), param_budget=param_budget, param_penalty_weight=param_penalty_weight,
        sparse_reward_scale=sparse_reward_scale,
    )
    spec = get_task_spec(task)
    policy_device = resolve_device(device)
    env_devices = resolve_devices(device, devices)
    if n_envs < len(env_devices):
        raise ValueError(f"n_envs ({n_envs}) must be >= the number of devices ({len(env_devices)})")
    device_of = env_device_map(n_envs, env_devices)
    n_batches = math.ceil(n_episodes / n_envs)
    cache = data_cache if data_cache is not None else DataCache(DataOptions())
    cache.preload(spec, env_devices, max_train_samples, max_val_samples)

    _seed_everything(seed)  # the policy's initial weights depend only on the seed
    agent = PPOAgent(
        obs_dim(use_telemetry), lr=lr, gamma=gamma, gae_lambda=gae_lambda, clip_ratio=clip_ratio,
        value_coef=value_coef, clip_value=value_clip is not None, value_clip=value_clip or 0.0,
        max_grad_norm=max_grad_norm, n_epochs=n_epochs, batch_size=minibatch_size, target_kl=target_kl,
        entropy_coef=entropy_coef, entropy_coef_min=entropy_coef_min,
        entropy_anneal_steps=math.ceil(entropy_anneal_episodes / n_envs) * ppo_updates_per_batch,
        hidden_dim=hidden_dim, device=policy_device, seed=seed, topology=spec.topology,
    )
    learner = LearnerState(agent, RunningMeanStd(obs_dim(use_telemetry), device=policy_device), RewardNormalizer())
    if resume_path is not None:
        saved_config = load_learner(resume_path, learner)
        differing = sorted(k for k, v in saved_config.items()
                           if k not in RESUMABLE_FIELDS and config.to_dict().get(k) != v)
        if differing:
            raise ValueError(f"--resume may only change {sorted(RESUMABLE_FIELDS)}; these differ from the "
                             f"checkpoint: {differing}")
        trim_logs(run_dir, learner.batches_completed)
        run_dir.record_resume(sys.argv[1:] if argv is None else argv, config.to_dict(), learner.batches_completed)
        _emit(sink, TelemetryEventType.CHECKPOINT_LOADED, f"resumed from {resume_path}",
              {"path": str(resume_path), "kind": "resume", "batch": learner.batches_completed})
    else:
        run_dir.write_config("ppo", sys.argv[1:] if argv is None else argv, config.to_dict(), {
            "data_dir": str(cache.options.data_dir), "devices": [str(d) for d in env_devices],
            "policy_device": str(policy_device), "preset": preset,
            "telemetry_level": "off" if sink is None else _sink_level(sink)})

    reward_fn = make_reward_fn(reward_family, spec, gamma, SparseRewardConfig(param_budget, param_penalty_weight,
                                                                                 sparse_reward_scale))
    detector = AnomalyDetector()
    controller = PPOController(agent, learner.obs_normalizer, use_telemetry=use_telemetry)
    env_map = {i: str(device_of[i]) for i in range(n_envs)}
    _emit(sink, TelemetryEventType.TRAINING_STARTED, f"PPO on {task}: {n_envs} envs, {n_batches} batches", {
        "command": "train ppo", "task": task, "topology": spec.topology, "preset": preset, "n_envs": n_envs,
        "env_devices": env_map, "total_batches": n_batches, "n_episodes": n_episodes,
        "obs_dim": obs_dim(use_telemetry), "config": config.to_dict(),
        "envs_per_device": {str(d): sum(1 for x in device_of if x == d) for d in env_devices}})

    history: list[dict[str, Any]] = []
    saved_batches = learner.batches_completed
    gradient_stats_pending = False  # set by an anomaly: the next update reports per-layer policy gradients
    while learner.batches_completed < n_batches:
        if should_stop is not None and should_stop():
            break
        b = learner.batches_completed
        started = time.perf_counter()
        _seed_everything(derive_seed(seed, b))
        n_b = min(n_envs, n_episodes - learner.episodes_completed)
        envs = [MorphoEnv(EnvSpec(spec, tuple(slots), max_epochs, seed + 10000 * b + 1000 * i, device_of[i],
                                  env_id=i, episode=learner.episodes_completed + i, batch=b, max_seeds=max_seeds,
                                  amp=amp, sink=sink), "ppo") for i in range(n_b)]
        data = EpochData.build(spec, cache, env_devices, batch_size=batch_size, seed=derive_seed(seed, b),
                               max_train_samples=max_train_samples, max_val_samples=max_val_samples)
        rollout = _Rollout(agent, learner.reward_normalizer, run_dir)
        results = run_episodes(envs, [controller] * n_b, data, reward_fn, on_step=rollout.store,
                               should_stop=should_stop)
        if len(rollout.rewards) != n_b * max_epochs:  # interrupted mid-batch: the last checkpoint is the resume point
            agent.buffer.clear()
            break
        rollout_seconds = time.perf_counter() - started

        update_started = time.perf_counter()
        metrics = _ppo_updates(agent, ppo_updates_per_batch, sink, gradient_stats_pending)
        learner.obs_normalizer.update(torch.stack(rollout.raw_observations))
        update_seconds = time.perf_counter() - update_started

        learner.batches_completed += 1
        learner.episodes_completed += n_b
        for r in results:
            run_dir.append("episodes.jsonl", r.to_dict())
        batch_accuracy = sum(r.final_accuracy for r in results) / n_b
        previous_rolling = learner.rolling_accuracy
        learner.rolling_window = [*learner.rolling_window, batch_accuracy][-ROLLING_WINDOW:]
        improved = learner.rolling_accuracy > learner.best_rolling_accuracy
        if improved:
            learner.best_rolling_accuracy = learner.rolling_accuracy

        report = detector.check_all(metrics.get("ratio_max", 1.0), metrics.get("ratio_min", 1.0),
                                    metrics.get("explained_variance", 1.0), bool(metrics.get("skipped_update")),
                                    False, learner.episodes_completed, n_episodes)
        for anomaly in report.anomaly_types:
            _emit(sink, TelemetryEventType[f"{anomaly.upper()}_DETECTED"], report.details[anomaly],
                  {"detail": report.details[anomaly], "batch": b, "episodes_completed": learner.episodes_completed,
                   "diagnostic": metrics.get("ratio_diagnostic")}, severity="warning")
        gradient_stats_pending = report.has_anomaly
        if report.has_anomaly and sink is not None:
            sink.escalate(ANOMALY_ESCALATION_EPOCHS)

        action_totals = {op.name: sum(r.action_counts[op.name] for r in results) for op in LifecycleOp}
        n_actions = max(1, sum(action_totals.values()))
        row = {
            "batch": b, "episodes_completed": learner.episodes_completed, "n_envs": n_b,
            "avg_accuracy": batch_accuracy, "rolling_accuracy": learner.rolling_accuracy,
            "best_rolling_accuracy": learner.best_rolling_accuracy,
            "env_accuracies": [r.final_accuracy for r in results],
            "avg_reward": sum(r.total_reward for r in results) / n_b,
            "action_shares": {op: n / n_actions for op, n in action_totals.items()},
            "reward_components": {k: sum(v) / len(v) for k, v in rollout.components.items()},
            "seeds_created": sum(r.seeds_created for r in results),
            "seeds_fossilized": sum(r.seeds_fossilized for r in results),
            "seeds_culled": sum(r.seeds_culled for r in results),
            "rollbacks": sum(r.rollbacks for r in results),
            "anomalies": report.anomaly_types,
            "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
            "env_epochs_per_second": n_b * max_epochs / rollout_seconds,
            "batch_loads": sum(data.train.materializations.values()) + sum(data.val.materializations.values()),
            **{k: v for k, v in metrics.items() if k != "ratio_diagnostic"},
        }
        history.append(row)
        run_dir.append("history.jsonl", row)
        _emit(sink, TelemetryEventType.PPO_UPDATE_COMPLETED, f"batch {b}: PPO update", {
            **{k: v for k, v in metrics.items()}, "batch": b, "episodes_completed": learner.episodes_completed})
        _emit(sink, TelemetryEventType.BATCH_COMPLETED,
              f"batch {b + 1}/{n_batches}: acc {batch_accuracy:.2f}% rolling {learner.rolling_accuracy:.2f}% "
              f"reward {row['avg_reward']:+.2f} kl {metrics.get('approx_kl', 0.0):.4f} "
              f"entropy {metrics.get('entropy', 0.0):.3f} ({rollout_seconds + update_seconds:.0f}s)",
              {**row, "fps": row["env_epochs_per_second"]})
        _emit_trend(sink, previous_rolling, learner, b)

        last = learner.batches_completed == n_batches
        if improved:
            save_learner(run_dir.checkpoints / "best.pt", learner, config, sink, "best")
        if learner.batches_completed % checkpoint_every == 0 or last:
            save_learner(run_dir.checkpoints / "latest.pt", learner, config, sink, "latest")
            saved_batches = learner.batches_completed
        if last:
            save_learner(run_dir.checkpoints / "final.pt", learner, config, sink, "final")
    if learner.batches_completed > saved_batches:  # stopped early: keep every completed batch resumable
        save_learner(run_dir.checkpoints / "latest.pt", learner, config, sink, "latest")
    return PPOTrainingResult(learner.batches_completed, learner.episodes_completed, learner.best_rolling_accuracy,
                             history)


class _Rollout:
    """Turns env steps into buffer transitions (normalized rewards) and step log lines, and keeps batch aggregates."""

    def __init__(self, agent: PPOAgent, reward_normalizer: RewardNormalizer, run_dir: RunDirectory) -> None:
        self.agent = agent
        self.reward_normalizer = reward_normalizer
        self.run_dir = run_dir
        self.raw_observations: list[torch.Tensor] = []
        self.rewards: list[float] = []
        self.components: dict[str, list[float]] = {}

    def store(self, steps: list[EnvStep]) -> None:
        for step in steps:
            info = step.decision.info
            self.raw_observations.append(info["raw_features"])
            total = step.reward.total()
            self.rewards.append(total)
            for name in SUMMED_FIELDS:
                self.components.setdefault(name, []).append(getattr(step.reward, name))
            self.agent.store_factored_transition(
                info["state"], info["action"], info["log_prob"], info["value"],
                self.reward_normalizer.update_and_normalize(total), step.record.is_terminal, info["used_masks"],
                env_id=step.env.env_id)
            self.run_dir.append("steps.jsonl", step_row(step))


def _sink_level(sink: TelemetrySink) -> str:
    level = getattr(sink, "level", None)
    return level.name.lower() if isinstance(level, TelemetryLevel) else "custom"


def _ppo_updates(agent: PPOAgent, updates: int, sink: TelemetrySink | None, gradient_stats: bool) -> dict[str, Any]:
    """`updates` PPO update calls on one rollout batch (stopping after an early stop), aggregated (§6.8).

    An update that leaves non-finite policy parameters is reverted from an in-memory copy. `gradient_stats` (after
    an anomaly) emits per-layer policy gradient statistics even when the run is not at debug level.
    """
    before = copy.deepcopy((agent.network.state_dict(), agent.optimizer.state_dict()))
    train_steps = agent.train_steps
    runs: list[dict[str, Any]] = []
    for k in range(1, updates + 1):
        m = agent.update_factored(clear_buffer=(k == updates))
        runs.append(m)
        if m.get("early_stopped"):
            agent.buffer.clear()
            break
    if not all(torch.isfinite(p).all() for p in agent.network.parameters()):
        agent.network.load_state_dict(before[0])
        agent.optimizer.load_state_dict(before[1])
        agent.train_steps = train_steps  # the entropy schedule does not advance on a reverted update
        _emit(sink, TelemetryEventType.NUMERICAL_INSTABILITY_DETECTED, "non-finite policy after update: reverted",
              {"detail": "non-finite policy parameters", "diagnostic": None}, severity="warning")
        return {"skipped_update": 1.0, "updates_run": len(runs)}
    if sink is not None and gradient_stats and not sink.wants(TelemetryEventType.GRADIENT_STATS):
        sink.escalate(1)  # the anomaly's escalation window has passed by now; reopen it for this report
    if sink is not None and sink.wants(TelemetryEventType.GRADIENT_STATS):
        _emit(sink, TelemetryEventType.GRADIENT_STATS, "policy gradient statistics",
              {"layers": collect_per_layer_gradients(agent.network)})
    merged: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if key in r]
        if key == "ratio_max":
            merged[key] = max(values)
        elif key == "ratio_min":
            merged[key] = min(values)
        elif key == "n_minibatch_updates":
            merged[key] = sum(values)
        elif key == "ratio_diagnostic":
            merged[key] = values[0]
        else:
            merged[key] = sum(values) / len(values)
    for r in runs:
        if "ratio_diagnostic" in r and "ratio_diagnostic" not in merged:
            merged["ratio_diagnostic"] = r["ratio_diagnostic"]
        if r.get("early_stopped"):
            merged.update(early_stopped=1.0, early_stop_epoch=r["early_stop_epoch"])
    merged["updates_run"] = len(runs)
    return merged


def _emit_trend(sink: TelemetrySink | None, previous: float, learner: LearnerState, batch: int) -> None:
    if len(learner.rolling_window) < 2:
        return
    delta = learner.rolling_accuracy - previous
    data = {"rolling_delta": delta, "batch": batch, "rolling_accuracy": learner.rolling_accuracy}
    if delta > 2.0:
        _emit(sink, TelemetryEventType.IMPROVEMENT_DETECTED, f"rolling accuracy +{delta:.2f} pp", data)
    elif delta < -2.0:
        _emit(sink, TelemetryEventType.DEGRADATION_DETECTED, f"rolling accuracy {delta:.2f} pp", data)
    elif abs(delta) < 0.5:
        _emit(sink, TelemetryEventType.PLATEAU_DETECTED, f"rolling accuracy flat ({delta:+.2f} pp)", data)


__all__ = ["PPOController", "PPOTrainingResult", "train_ppo_vectorized"]
