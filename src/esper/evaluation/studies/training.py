"""A study's training run: one PPO run in its own directory with its own telemetry (so a resume cuts back its own
events), continued from its last checkpoint, and left as it is once finished."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

from esper.data.tasks import DataCache
from esper.evaluation.ppo_runs import TrainingDir, open_training_dir, training_result_lines
from esper.evaluation.studies.plan import StudyPlan
from esper.simic.ppo.checkpoint import read_policy_checkpoint
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import PPORun, train_ppo
from esper.storage.rundir import checkpoints_dir

__all__ = ["train_run"]


def train_run(plan: StudyPlan, config: TrainingConfig, checkpoint: Path | None, train_path: Path, cache: DataCache,
              run: int, preset: str) -> bool:
    """Train (or continue training) the study's policy `run` in `train_path` from `checkpoint` (None: from the start);
    False when stopped before the last batch."""
    hooks, total, max_epochs = plan.hooks, config.ppo.total_episodes(), config.episode.max_epochs
    episodes_done = int(read_policy_checkpoint(checkpoint)["episodes_completed"]) if checkpoint is not None else 0
    if episodes_done >= total and (checkpoints_dir(train_path) / "final.pt").is_file():
        hooks.note(f"Training run {run}: finished ({episodes_done} episodes in {train_path}).")
        return True
    hooks.note(f"Training run {run} ({train_path}):")
    how = TrainingDir(list(plan.argv), overwrite=plan.overwrite, telemetry_level=hooks.telemetry_level,
                      note=hooks.note)
    train_dir, kept = open_training_dir(train_path, config, checkpoint, cache, preset, how)
    with closing(train_dir), hooks.telemetry(train_dir, config.to_dict(), kept) as telemetry:
        ppo = PPORun(train_dir, sink=telemetry.sink, data=cache, resume_from=checkpoint,
                     should_stop=hooks.should_stop, progress=telemetry.steps)
        with hooks.training(config, preset):
            if telemetry.progress is not None:
                telemetry.progress.start("training", total * max_epochs, done=episodes_done * max_epochs,
                                         round_size=config.ppo.n_envs)
            result = train_ppo(config, ppo)
        stopped = hooks.should_stop()
        for line in training_result_lines(config.ppo.n_episodes, ppo, result, stopped=stopped):
            hooks.note(line)
    return not stopped and result.episodes_completed >= total
