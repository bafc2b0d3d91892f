"""A PPO run's directory as `esper train ppo` and a study's training runs open it: started afresh with its
config.json, or continued from a checkpoint with its logs cut back to it; and what a finished call of `train_ppo`
says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.data.tasks import DataCache, data_source, get_task_spec
from esper.env.rewards import resolved_cost
from esper.evaluation.resume import EventFilter
from esper.evaluation.run_data import data_record
from esper.execution.devices import resolve_device, resolve_devices
from esper.simic.ppo.checkpoint import read_policy_checkpoint, saved_config, trim_logs
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import PPORun, PPOTrainingResult
from esper.storage.rundir import RunDirectory, checkpoints_dir
from esper.storage.rundirs import prepare_run_dir

__all__ = ["TrainingDir", "batch_event_kept", "open_training_dir", "saved_run", "training_result_lines"]


def batch_event_kept(batches: int) -> EventFilter:
    """Whether an event belongs to the first `batches` rollout batches (None: it carries no batch index).

    Batch events carry the 0-based index of their batch; checkpoint events carry the number of batches completed
    when they were written, so the checkpoint of the resume point itself is kept."""

    def kept(event: dict[str, Any]) -> bool | None:
        data = event.get("data")
        batch = data.get("batch") if isinstance(data, dict) else None
        if not isinstance(batch, int) or isinstance(batch, bool):
            return None
        if event.get("event_type") in ("CHECKPOINT_SAVED", "CHECKPOINT_LOADED"):
            return batch <= batches
        return batch < batches

    return kept


@dataclass(frozen=True)
class TrainingDir:
    """How a PPO run directory is opened: the command that runs it (`argv`), whether it replaces an earlier run, the
    telemetry level its events are recorded at (None: no event log), and where a line about a resume goes."""

    argv: list[str]
    overwrite: bool
    telemetry_level: str | None
    note: Callable[[str], None]


def open_training_dir(path: Path, config: TrainingConfig, checkpoint: Path | None, cache: DataCache,
                      preset: str | None, how: TrainingDir) -> tuple[RunDirectory, EventFilter | None]:
    """The PPO run directory, and for a continued one which events of its log the resume keeps (the log is its
    telemetry's to cut). Reopened for a checkpoint (logs cut back to it, the resume logged), else started afresh with
    config.json, which records `preset` (a directory left by an attempt that never finished a batch is reused)."""
    if checkpoint is not None:
        run_dir = RunDirectory(path, resume=True)
        saved = read_policy_checkpoint(checkpoint)
        batches = int(saved["batches_completed"])
        trim_logs(path, checkpoint, batches, int(saved["episodes_completed"]))
        how.note(f"Resuming from {checkpoint} (after batch {batches})")
        run_dir.record_resume(how.argv, config.to_dict(), {"from_batch": batches})
        return run_dir, batch_event_kept(batches)
    prepare_run_dir(path, command="ppo", overwrite=how.overwrite, resumable=lambda p: False)
    run_dir = RunDirectory(path)
    episode, reward, execution = config.episode, config.reward, config.execution
    task = get_task_spec(episode.task)
    run_dir.write_config("ppo", how.argv, config.to_dict(), {
        "data_dir": str(cache.options.data_dir), "data_source": data_source(episode.task, cache.options),
        "devices": [str(d) for d in resolve_devices(execution.device, execution.devices)],
        "policy_device": str(resolve_device(execution.device)), "preset": preset,
        "telemetry_level": how.telemetry_level, **data_record(task, episode.augment),
        **({"param_cost": reward.type_param_costs} if config.family is not None else resolved_cost(
            reward.reward_family, task, reward.charged_param_cost(), charge=reward.charge,
            compute_cost=reward.charged_compute_cost(), max_train_samples=episode.max_train_samples))})
    return run_dir, None


def saved_run(train_dir: Path) -> tuple[TrainingConfig, Path] | None:
    """A training run so far: the config its last checkpoint holds and that checkpoint (None: none yet)."""
    latest = checkpoints_dir(train_dir) / "latest.pt"
    if not latest.exists():
        return None
    return saved_config(read_policy_checkpoint(latest), latest), latest


def training_result_lines(n_episodes: int, run: PPORun, result: PPOTrainingResult, *, stopped: bool) -> list[str]:
    """What a call of `train_ppo` did (`n_episodes`: the episodes it was asked for): nothing (a finished run), and the
    batches, episodes and best accuracy so far."""
    lines = []
    if run.resume_from is not None and not result.history and not stopped:
        lines.append(f"Nothing to train: this run already completed {result.episodes_completed} episodes "
                     f"(--episodes {n_episodes}).")
    best = f"{result.best_rolling_accuracy:.2f}%" if result.batches_completed else "—"
    lines.append(f"Batches: {result.batches_completed}, episodes: {result.episodes_completed}, best rolling "
                 f"accuracy: {best}")
    return lines
