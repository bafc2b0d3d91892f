"""A study's paired-episode phases as the command line runs them: each in its run directory, with its own telemetry
hub and progress, recording the setting it measured so that a rerun continues it or (another setting) starts it over.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from esper.cli.common import WORKER_FIELDS, closing_hub, emit, make_hub
from esper.cli.episodes import open_episode_run
from esper.cli.rundirs import check_same_arguments
from esper.env.rewards import resolved_param_cost
from esper.evaluation.comparison import comparison_phases, parse_controllers
from esper.evaluation.episodes import one_test_sample
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.results import ComparisonResult
from esper.evaluation.study import run_evaluation
from esper.leyline import TelemetryEventType
from esper.runtime.rundir import RunDirectoryError, recorded_config
from esper.runtime.tasks import DataCache, get_task_spec
from esper.simic.ppo.config import TrainingConfig

__all__ = ["measured_setting", "phase_runner"]


def measured_setting(config: TrainingConfig) -> dict[str, Any]:
    """The training config without where its envs ran (workers change the wall time, not a single number), with
    the λ_p its reward charged in place of the null that means "the task's" (`not charged` where only logged: a
    family type's selection episodes, which no policy learns from)."""
    setting = {k: v for k, v in config.to_dict().items() if k not in WORKER_FIELDS}
    setting["param_cost"] = resolved_param_cost(config.reward_family, get_task_spec(config.task),
                                                config.charged_param_cost(), max_train_samples=config.max_train_samples,
                                                logged_only=True)
    return setting


def _phase_config(path: Path, phase: Phase, config: TrainingConfig, settings: dict[str, Any]
                  ) -> tuple[dict[str, Any], bool]:
    """A phase's arguments, and whether a stored phase was of something else (then it starts over: its results
    describe a policy, a choice or a setting that no longer exists)."""
    phase_config = {"controllers": phase.labels, "specs": phase.specs, "episodes": phase.seeds,
                    "seed_stream": phase.plan.stream.value, "training": measured_setting(config),
                    **{k: v for k, v in settings.items() if k not in ("seeds", "selection_seeds", "runs")}}
    if not (path / "config.json").exists():
        return phase_config, False
    try:
        check_same_arguments(path, recorded_config(path), phase_config, may_differ=("episodes",))
    except RunDirectoryError:
        return phase_config, True
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
                                                "param_cost": phase_config["training"]["param_cost"]}, phases=phases,
                                       plan=phase.plan)
    tie = args.tie_threshold if args.tie_threshold is not None else one_test_sample(phase.plan, cache)
    hub, progress = make_hub(args, run_dir, phase_config)
    with closing_hub(hub, run_dir):
        emit(hub, TelemetryEventType.TRAINING_STARTED, f"study {phase.name} on {config.task}", {
            "command": f"study {phase.name}", "task": config.task, "topology": phase.plan.task.topology,
            "n_envs": len(phase.specs), "controllers": phase.labels, "n_episodes": phase.seeds,
            "config": phase_config, "reward": phase.plan.describe_reward()})
        progress.start(phase.name, phase.seeds * len(phase.specs) * config.max_epochs, round_size=len(phases[0]),
                       done=(resume.episodes_done if resume is not None else 0) * config.max_epochs)
        return run_evaluation(phase.plan, phase.specs, phase.labels, phase.seeds, cache, run_dir=run_dir, sink=hub,
                              resume=resume, match=phase.match, tie_threshold=tie)
