"""A study's phases as the command line runs them: each paired-episode phase in its run directory, with its own
telemetry hub and progress, recording the setting it measured so that a rerun continues it or (another setting)
starts it over; each training run in its own PPO run directory, continued from its last checkpoint.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from esper.cli.common import WORKER_FIELDS, closing_hub, console, data_record, emit, make_hub, phase_progress
from esper.cli.episodes import open_episode_run
from esper.cli.rundirs import check_same_arguments, prepare_run_dir
from esper.cli.train_ppo import StopAfterStep, open_training_dir, print_training_result, print_training_start
from esper.data.tasks import DataCache, get_task_spec
from esper.env.rewards import resolved_cost
from esper.env.setting import EpisodeSetting
from esper.evaluation.comparison import comparison_phases, parse_controllers
from esper.evaluation.episodes import one_test_sample
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.results import ComparisonResult
from esper.evaluation.study import run_evaluation
from esper.leyline import TelemetryEventType
from esper.leyline.errors import UserInputError
from esper.simic.ppo.checkpoint import read_policy_checkpoint, saved_config
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import PPORun, train_ppo
from esper.storage.rundir import (
    RunDirectory,
    RunDirectoryError,
    checkpoints_dir,
    holds_results,
    recorded_config,
    write_json_atomic,
)

__all__ = ["measured_setting", "phase_runner", "saved_run", "train_run"]


def open_study(path: Path, args: argparse.Namespace, settings: dict[str, Any], episode: EpisodeSetting
               ) -> tuple[RunDirectory, bool]:
    """The study directory, new or (same settings; more seeds or runs allowed) continued; True when new. Its
    config.json records the data of the study's base `episode` setting: its augmentation and validation split."""
    if prepare_run_dir(path, command="study", overwrite=args.overwrite, resumable=holds_results) == "new":
        study = RunDirectory(path)
        study.write_config("study", args.argv, settings, {"data_dir": str(args.data_dir),
                                                          **data_record(get_task_spec(episode.task), episode.augment)})
        return study, True
    check_same_arguments(path, recorded_config(path), settings, may_differ=("seeds", "runs"))
    return RunDirectory(path, resume=True), False


def measured_setting(config: TrainingConfig) -> dict[str, Any]:
    """The training config (nested, as it records itself) without where its envs ran (workers change the wall time,
    not a single number), with the λ its reward charged in place of the null that means "the task's" (`not charged`
    where only logged: a family type's selection episodes, which no policy learns from)."""
    setting = config.to_dict()
    setting["execution"] = {k: v for k, v in setting["execution"].items() if k not in WORKER_FIELDS}
    episode, reward = config.episode, config.reward
    setting["reward"].update(resolved_cost(reward.reward_family, get_task_spec(episode.task),
                                           reward.charged_param_cost(), charge=reward.charge,
                                           compute_cost=reward.charged_compute_cost(),
                                           max_train_samples=episode.max_train_samples, logged_only=True))
    return setting


def _with_new_fields(path: Path, recorded: dict[str, Any]) -> dict[str, Any]:
    """A phase recorded before the training config had some of today's settings ran as their defaults do: a setting
    only describes one its phase could have run in once it exists, and a new setting defaults to what the code did
    before it. So a phase stays valid across such a change instead of being rerun (hours of a study). A phase recorded
    before the config had sections is refused, naming the fix."""
    training = recorded.get("training")
    if not isinstance(training, dict):
        return recorded
    defaults = measured_setting(TrainingConfig())
    flat = sorted(k for k in training if k not in defaults)
    if flat:
        raise UserInputError(f"{path / 'config.json'} records the training setting of an esper whose config had no "
                             f"sections ({', '.join(flat[:3])}, ... outside {', '.join(TrainingConfig.sections())}): "
                             f"continue this study with that esper version, or start it over with --overwrite")
    complete = {k: ({**v, **training[k]} if isinstance(v, dict) and isinstance(training.get(k), dict) else
                    training.get(k, v)) for k, v in defaults.items()}
    return {**recorded, "training": complete}


def _phase_config(path: Path, phase: Phase, config: TrainingConfig, settings: dict[str, Any]
                  ) -> tuple[dict[str, Any], bool]:
    """A phase's arguments, and whether a stored phase was of something else (then it starts over: its results
    describe a policy, a choice or a setting that no longer exists)."""
    phase_config = {"controllers": phase.labels, "specs": phase.specs, "episodes": phase.seeds,
                    "seed_stream": phase.plan.stream.value, "training": measured_setting(config),
                    **{k: v for k, v in settings.items() if k not in ("seeds", "selection_seeds", "runs")}}
    if not (path / "config.json").exists():
        return phase_config, False
    recorded = recorded_config(path)
    complete = _with_new_fields(path, recorded)
    try:
        check_same_arguments(path, complete, phase_config, may_differ=("episodes",))
    except RunDirectoryError:
        return phase_config, True
    if complete != recorded:  # from now on the phase's record names every field of the setting it ran in
        record = json.loads((path / "config.json").read_text(encoding="utf-8"))
        write_json_atomic(path / "config.json", {**record, "config": complete})
    return phase_config, False


def phase_runner(args: argparse.Namespace, config: TrainingConfig, settings: dict[str, Any], cache: DataCache
                  ) -> PhaseRunner:
    """Runs (or continues) a phase of the study with its own telemetry and progress."""
    return lambda phase: _run_phase(args, phase, config, settings, cache)


def _run_phase(args: argparse.Namespace, phase: Phase, config: TrainingConfig, settings: dict[str, Any],
               cache: DataCache) -> ComparisonResult:
    phases = comparison_phases(parse_controllers(phase.specs), phase.labels)
    phase_config, stale = _phase_config(phase.path, phase, config, settings)
    run_dir, resume = open_episode_run(phase.path, "compare", overwrite=stale, argv=args.argv, config=phase_config,
                                       runtime={"data_dir": str(args.data_dir),
                                                **data_record(phase.plan.task, phase.plan.episode.augment),
                                                **{k: phase_config["training"]["reward"][k]
                                                   for k in ("param_cost", "charge", "compute_cost")}},
                                       phases=phases,
                                       plan=phase.plan)
    tie = args.tie_threshold if args.tie_threshold is not None else one_test_sample(phase.plan, cache)
    hub, progress = make_hub(args, run_dir, phase_config)
    with closing_hub(hub, run_dir):
        task = phase.plan.task
        emit(hub, TelemetryEventType.TRAINING_STARTED, f"study {phase.name} on {task.name}", {
            "command": f"study {phase.name}", "task": task.name, "topology": task.topology,
            "n_envs": len(phase.specs), "controllers": phase.labels, "n_episodes": phase.seeds,
            "config": phase_config, "reward": phase.plan.describe_reward(),
            "augmentation": data_record(phase.plan.task, phase.plan.episode.augment)["augmentation"]})
        max_epochs = phase.plan.episode.max_epochs
        progress.start(phase.name, phase.seeds * len(phase.specs) * max_epochs, round_size=len(phases[0]),
                       done=(resume.episodes_done if resume is not None else 0) * max_epochs)
        return run_evaluation(phase.plan, phase.specs, phase.labels, phase.seeds, cache, run_dir=run_dir, sink=hub,
                              resume=resume, match=phase.match, tie_threshold=tie)


def saved_run(train_dir: Path) -> tuple[TrainingConfig, Path] | None:
    """A study's training run so far: the config its last checkpoint holds and that checkpoint (None: none yet)."""
    latest = checkpoints_dir(train_dir) / "latest.pt"
    if not latest.exists():
        return None
    return saved_config(read_policy_checkpoint(latest), latest), latest


def train_run(args: argparse.Namespace, config: TrainingConfig, checkpoint: Path | None, train_path: Path,
              cache: DataCache, run: int, preset: str) -> bool:
    """Train (or continue training) a study's policy `run` in its directory, with that directory's own telemetry (so
    a resume trims its own events); False when stopped before the last batch."""
    episodes_done = int(read_policy_checkpoint(checkpoint)["episodes_completed"]) if checkpoint is not None else 0
    if episodes_done >= config.ppo.total_episodes() and (checkpoints_dir(train_path) / "final.pt").is_file():
        console.print(f"Training run {run}: finished ({episodes_done} episodes in {train_path}).")
        return True
    console.print(f"Training run {run} ({train_path}):")
    train_dir = open_training_dir(train_path, config, args, checkpoint, cache, preset)
    hub, progress = make_hub(args, train_dir, config.to_dict())
    stop = StopAfterStep()
    with closing_hub(hub, train_dir):
        ppo = PPORun(train_dir, sink=hub, data=cache, resume_from=checkpoint, should_stop=lambda: stop.requested,
                     progress=phase_progress(progress))
        print_training_start(config, progress, preset=preset, debug=args.telemetry_level == "debug",
                             episodes_done=episodes_done)
        with stop.installed():
            result = train_ppo(config, ppo)
        print_training_result(config.ppo.n_episodes, ppo, result, stopped=stop.requested)
    return not stop.requested and result.episodes_completed >= config.ppo.total_episodes()
