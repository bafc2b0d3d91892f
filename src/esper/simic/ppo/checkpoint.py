"""PPO learner state and its checkpoint (`esper-ppo-v2`): everything an exact resume needs, in plain values.

The checkpoint holds the run's `TrainingConfig` (its nested `to_dict()`), which rebuilds the agent, so a policy file
is self-describing; one holding a config of another shape (say, from before the config had sections) is refused.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import esper
from esper.data.tasks import TASKS, get_task_spec
from esper.env.episode_logs import EpisodeLogs
from esper.env.features import obs_dim
from esper.leyline import OBS_SCHEMA
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import SEED_RULE
from esper.simic.normalization import RewardNormalizer, RunningMeanStd
from esper.simic.ppo.agent import PPOAgent
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.history import PPOHistoryRow
from esper.storage.checkpoint import (
    CheckpointFormatError,
    atomic_save,
    blueprint_record,
    capture_rng_state,
    check_blueprint_head,
    load_checkpoint,
    load_error_summary,
    plugin_fix,
    require_finite,
    require_keys,
    restore_rng_state,
)
from esper.storage.logcut import UnitLog

__all__ = ["PPO_FORMAT", "RESUMABLE_FIELDS", "TRAINING_LABEL", "PPOLearnerState", "load_policy_state",
           "read_policy_checkpoint", "resume_config", "saved_config", "seed_everything", "trim_logs"]

PPO_FORMAT = "esper-ppo-v2"
RESUMABLE_FIELDS = frozenset({"ppo.n_episodes", "episode.amp", "execution.device", "execution.devices",
                              "execution.workers", "execution.executor", "execution.ray_address"})
"""The only settings (by dotted key) a resume may change: extend the run, or move it to other hardware or other
workers."""
RETRAIN = ("A checkpoint written by another esper version loads in that version: retrain the policy with this one (a "
           "run continues only in the esper version that started it)")
TRAINING_LABEL = "ppo"
"""The controller label of training episodes in steps.jsonl and episodes.jsonl."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class PPOLearnerState:
    """The run's config, its agent, and the normalizers and counters that make the run resumable."""

    config: TrainingConfig
    agent: PPOAgent
    obs_normalizer: RunningMeanStd
    reward_normalizer: RewardNormalizer
    batches_completed: int = 0
    episodes_completed: int = 0
    rolling_window: list[float] = field(default_factory=list)
    best_rolling_accuracy: float = float("-inf")

    @classmethod
    def new(cls, config: TrainingConfig, device: torch.device) -> PPOLearnerState:
        """A fresh learner; the policy's initial weights depend only on `config.seed`."""
        seed_everything(config.seed)
        space = get_task_spec(config.episode.task).action_space
        dim = obs_dim(space, config.ppo.use_telemetry)
        agent = PPOAgent(config.ppo, seed=config.seed, state_dim=dim, space=space, device=device)
        return cls(config, agent, RunningMeanStd(dim, device=device), RewardNormalizer())

    @property
    def rolling_accuracy(self) -> float:
        """Mean of the last batch accuracies (0 before the first batch)."""
        return sum(self.rolling_window) / len(self.rolling_window) if self.rolling_window else 0.0

    def save(self, path: Path) -> None:
        agent_state = self.agent.state_dict()
        rng = capture_rng_state()
        rng.update(action_generator=agent_state["action_generator"],
                   minibatch_generator=agent_state["minibatch_generator"])
        atomic_save({
            "format": PPO_FORMAT,
            "esper_version": esper.__version__,
            "obs_schema": OBS_SCHEMA,
            **blueprint_record(self.agent.space),
            "seed_rule": SEED_RULE,
            "config": self.config.to_dict(),
            "agent": agent_state,
            "batches_completed": self.batches_completed,
            "episodes_completed": self.episodes_completed,
            "obs_normalizer": self.obs_normalizer.state_dict(),
            "reward_normalizer": self.reward_normalizer.state_dict(),
            "rng": rng,
            "best_rolling_accuracy": self.best_rolling_accuracy,
            "rolling_window": list(self.rolling_window),
        }, path)

    def restore(self, data: dict[str, Any], path: Path | str = "the checkpoint") -> None:
        """Every piece of learner state from a checkpoint read with `read_policy_checkpoint` (`path` names it in
        errors)."""
        if data.get("seed_rule") != SEED_RULE:
            raise CheckpointFormatError(f"Checkpoint {path} was saved under another seed rule "
                                        f"({data.get('seed_rule')!r}, this esper uses {SEED_RULE!r}): resumed, its "
                                        f"later batches would run on other seeds than the run began with. Start a new "
                                        f"run (the policy itself still evaluates as ppo:PATH)")
        load_policy_state(self.agent, self.obs_normalizer, data, path)
        try:
            self.reward_normalizer.load_state_dict(data["reward_normalizer"])
            self.batches_completed = int(data["batches_completed"])
            self.episodes_completed = int(data["episodes_completed"])
            self.rolling_window = [float(x) for x in data["rolling_window"]]
            self.best_rolling_accuracy = float(data["best_rolling_accuracy"])
            restore_rng_state(data["rng"])
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise CheckpointFormatError(f"Checkpoint {path} has unusable learner state ({load_error_summary(exc)}): "
                                        f"resume from another checkpoint or start a new run") from exc


POLICY_KEYS = ("config", "agent", "obs_normalizer", "reward_normalizer", "batches_completed", "episodes_completed",
               "rng", "best_rolling_accuracy", "rolling_window")


def read_policy_checkpoint(path: Path) -> dict[str, Any]:
    """A PPO checkpoint's contents, refusing another format, observation schema or blueprint head, missing entries,
    an invalid config and non-finite weights, so nothing downstream meets a half-usable policy."""
    data = load_checkpoint(path, PPO_FORMAT, map_location="cpu")
    if data.get("obs_schema") != OBS_SCHEMA:
        raise CheckpointFormatError(f"Checkpoint {path} uses observation schema {data.get('obs_schema')!r}, expected "
                                    f"{OBS_SCHEMA!r}: retrain the policy with this esper version")
    require_keys(data, path, POLICY_KEYS)
    if not isinstance(data["agent"], dict) or not isinstance(data["obs_normalizer"], dict):
        raise CheckpointFormatError(f"Checkpoint {path}: 'agent' and 'obs_normalizer' must be dicts; use a checkpoint "
                                    f"saved by this esper version")
    require_keys(data["agent"], f"{path} agent", ("network", "optimizer", "train_steps", "action_generator",
                                                  "minibatch_generator"))
    require_finite(data, path, ("agent", "obs_normalizer"))
    config = saved_config(data, path)
    check_blueprint_head(path, data, get_task_spec(config.episode.task).action_space)
    return data


def saved_config(data: dict[str, Any], path: Path | str) -> TrainingConfig:
    """The `TrainingConfig` a checkpoint read with `read_policy_checkpoint` holds; one of another shape (written by
    another esper version) or naming a task no loaded plugin registers is refused, naming the fix."""
    if not isinstance(data["config"], dict):
        raise CheckpointFormatError(f"Checkpoint {path}: 'config' must be a dict of TrainingConfig settings")
    episode = data["config"].get("episode")
    task = episode.get("task") if isinstance(episode, dict) else None
    if isinstance(task, str) and task.lower() not in TASKS and ":" not in task:
        raise CheckpointFormatError(f"{path} was trained on task '{task}', which no loaded plugin registers: "
                                    f"{plugin_fix(data)}")
    _check_teacher_record(data["config"].get("ppo"), path)
    try:
        return TrainingConfig.from_record(data["config"], where=f"Checkpoint {path}", fix=RETRAIN)
    except UserInputError as exc:
        raise CheckpointFormatError(str(exc)) from exc


def _check_teacher_record(ppo: object, path: Path | str) -> None:
    """A residual policy decides on top of its teacher every time it runs; a tuned heuristic teacher is named by its
    record's path, so a record that is gone (a study directory moved, not copied) is named as what is missing."""
    teacher = ppo.get("teacher") if isinstance(ppo, dict) else None
    kind, _, record = teacher.partition(":") if isinstance(teacher, str) else ("", "", "")
    if kind == "heuristic" and record and not Path(record).is_file():
        if not Path(record).is_absolute():  # a teacher named by hand, relative to where its run started
            raise CheckpointFormatError(f"{path} is a policy residual on the tuned heuristic recorded at {record}, "
                                        f"a path relative to the directory its run started in, and not found from "
                                        f"{Path.cwd()}: run from that directory")
        raise CheckpointFormatError(f"{path} is a policy residual on the tuned heuristic recorded at {record}, which "
                                    f"is gone (was its study directory moved?): put the record back at that path, or "
                                    f"copy a study directory rather than move it")


def load_policy_state(agent: PPOAgent, obs_normalizer: RunningMeanStd, data: dict[str, Any], path: Path | str
                      ) -> None:
    """The policy and its observation statistics from a checkpoint; tensors that do not fit are a format error."""
    try:
        agent.load_state_dict(data["agent"])
        obs_normalizer.load_state_dict(data["obs_normalizer"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointFormatError(f"Checkpoint {path} does not fit its own config ({load_error_summary(exc)}): the "
                                    f"file was altered or written by another esper version; use another checkpoint"
                                    ) from exc


def resume_config(saved: TrainingConfig, requested: TrainingConfig) -> TrainingConfig:
    """The saved config with the requested values of the resumable fields; any other difference is an error."""
    saved_dict, requested_dict = saved.dotted_dict(), requested.dotted_dict()
    differing = sorted(k for k, v in requested_dict.items() if k not in RESUMABLE_FIELDS and saved_dict[k] != v)
    if differing:
        raise UserInputError(f"A resumed run may only change {sorted(RESUMABLE_FIELDS)}, but these differ from the "
                             f"checkpoint: {differing}. Use another --run-dir for a new run, or --overwrite to replace "
                             f"this one.")
    return saved.with_overrides(**{k: requested_dict[k] for k in sorted(RESUMABLE_FIELDS)})


def trim_logs(run_dir: Path, checkpoint: Path, batches: int, episodes: int) -> None:
    """Cut the run's logs back to `checkpoint`, which completed `batches` batches and `episodes` episodes
    (`esper.storage.logcut`): rows of later batches, a torn last line among them, are dropped and run again. A batch
    or episode the checkpoint counts but a log lacks is refused before anything is cut: the checkpoint has learned
    from it and cannot run it again."""
    history = UnitLog.read(run_dir / PPOHistoryRow.FILE, lambda row: row.get("batch"))
    episode_logs = EpisodeLogs.read(run_dir)
    batch = history.first_incomplete(dict.fromkeys(range(batches), 1))
    if batch is not None:
        raise history.refuse(f"the row of batch {batch}", checkpoint, run_dir)
    kept = [(TRAINING_LABEL, k) for k in range(episodes)]
    lacking = episode_logs.lacking(kept)
    if lacking is not None:
        log, (_, episode) = lacking
        raise log.refuse(f"rows of episode {episode}", checkpoint, run_dir)
    history.cut(set(range(batches)))
    episode_logs.cut(set(kept))
