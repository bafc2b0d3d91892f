"""PPO learner state and its checkpoint (`esper-ppo-v1`, DESIGN §1.7, §6.15): everything an exact resume needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import esper
from esper.leyline import OBS_SCHEMA, TelemetryEvent, TelemetryEventType, TelemetrySink
from esper.runtime.checkpoint import atomic_save, capture_rng_state, load_checkpoint, restore_rng_state
from esper.runtime.rundir import RunDirectory, read_jsonl, rewrite_jsonl
from esper.simic.normalization import RewardNormalizer, RunningMeanStd
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.controller import PPO_FORMAT

RESUMABLE_FIELDS = frozenset({"n_episodes", "device", "devices", "amp"})
"""The only config fields a resume may change: extend the run, or move it to other hardware."""


@dataclass
class LearnerState:
    agent: PPOAgent
    obs_normalizer: RunningMeanStd
    reward_normalizer: RewardNormalizer
    batches_completed: int = 0
    episodes_completed: int = 0
    rolling_window: list[float] = field(default_factory=list)
    best_rolling_accuracy: float = float("-inf")

    @property
    def rolling_accuracy(self) -> float:
        """Mean of the last 10 batch accuracies (0 before the first batch)."""
        return sum(self.rolling_window) / len(self.rolling_window) if self.rolling_window else 0.0


def save_learner(path: Path, learner: LearnerState, config: TrainingConfig, sink: TelemetrySink | None,
                 kind: str) -> None:
    agent_state = learner.agent.state_dict()
    rng = capture_rng_state()
    rng.update(action_generator=agent_state["action_generator"], minibatch_generator=agent_state["minibatch_generator"])
    atomic_save({
        "format": PPO_FORMAT,
        "esper_version": esper.__version__,
        "obs_schema": OBS_SCHEMA,
        "config": config.to_dict(),
        "agent": agent_state,
        "network": agent_state["network"],
        "optimizer": agent_state["optimizer"],
        "train_steps": agent_state["train_steps"],
        "batches_completed": learner.batches_completed,
        "episodes_completed": learner.episodes_completed,
        "obs_normalizer": learner.obs_normalizer.state_dict(),
        "reward_normalizer": learner.reward_normalizer.state_dict(),
        "rng": rng,
        "best_rolling_accuracy": learner.best_rolling_accuracy,
        "rolling_window": list(learner.rolling_window),
    }, path)
    if sink is not None and sink.wants(TelemetryEventType.CHECKPOINT_SAVED):
        sink.emit(TelemetryEvent(TelemetryEventType.CHECKPOINT_SAVED, message=f"saved {kind} checkpoint {path}",
                                 data={"path": str(path), "kind": kind, "batch": learner.batches_completed}))


def resolve_resume_path(path: Path) -> Path:
    """A checkpoint file, or a run directory meaning its checkpoints/latest.pt."""
    return path / "checkpoints" / "latest.pt" if path.is_dir() else path


def read_checkpoint_config(path: Path) -> dict[str, Any]:
    config: dict[str, Any] = load_checkpoint(resolve_resume_path(path), PPO_FORMAT)["config"]
    return config


def load_learner(path: Path, learner: LearnerState) -> dict[str, Any]:
    """Restore every piece of learner state from a checkpoint; returns the checkpoint's config dict."""
    data = load_checkpoint(resolve_resume_path(path), PPO_FORMAT)
    learner.agent.load_state_dict(data["agent"])
    learner.obs_normalizer.load_state_dict(data["obs_normalizer"])
    learner.reward_normalizer.load_state_dict(data["reward_normalizer"])
    learner.batches_completed = int(data["batches_completed"])
    learner.episodes_completed = int(data["episodes_completed"])
    learner.rolling_window = [float(x) for x in data["rolling_window"]]
    learner.best_rolling_accuracy = float(data["best_rolling_accuracy"])
    restore_rng_state(data["rng"])
    config: dict[str, Any] = data["config"]
    return config


def trim_logs(run_dir: RunDirectory, batches_completed: int) -> None:
    """Drop log lines of a batch that was interrupted, so the resumed batch is not recorded twice."""
    for name in ("steps.jsonl", "episodes.jsonl", "history.jsonl"):
        path = run_dir.path / name
        if not path.exists():
            continue
        rewrite_jsonl(path, [row for row in read_jsonl(path) if row.get("batch", 0) < batches_completed])
