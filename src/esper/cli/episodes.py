"""What the episode commands (`train heuristic`, `compare`, a study's evaluation) share: the episode plan, data
loading, and opening (or resuming) their run directory."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esper.cli.common import console, data_options, data_record, preload_data, scale_changes, worker_options
from esper.cli.rundirs import check_same_arguments, prepare_run_dir
from esper.data.readers import SPLITS
from esper.data.tasks import DataCache, data_source, get_task_spec
from esper.env.rewards import resolved_cost
from esper.env.setting import EpisodeSetting
from esper.evaluation.episodes import EpisodePlan, paired_seeds
from esper.evaluation.resume import ResumePoint, resume_point
from esper.execution.devices import resolve_devices
from esper.nissa import trim_event_log
from esper.storage.rundir import RunDirectory, RunDirectoryError, read_jsonl, recorded_config

EPISODE_COUNT_KEY = "episodes"
"""The one argument a rerun may change: more paired episodes extend the run (each episode is seeded by its index)."""


def episode_plan(args: argparse.Namespace, devices: list[str] | None, *, allow_setting_change: bool = False
                 ) -> EpisodePlan:
    """The paired-episode plan of the command line; an unusable reward setting fails here, before any work."""
    env_devices = resolve_devices(args.device, devices)
    plan = EpisodePlan(
        episode=episode_setting(args), seed=args.seed, devices=env_devices, max_test_samples=args.max_test_samples,
        reward_family=args.reward_family, param_cost=args.param_cost, charge=args.charge,
        compute_cost=args.compute_cost, workers=worker_options(args, env_devices),
        allow_setting_change=allow_setting_change,
    )
    plan.reward_config()
    return plan


def episode_setting(args: argparse.Namespace) -> EpisodeSetting:
    """The episodes' setting the episode commands' flags give (the batch size: the task's, unless given)."""
    task = get_task_spec(args.task)
    return EpisodeSetting.from_dict({**scale_changes(args), "slots": args.slots, "max_seeds": args.max_seeds,
                                     "batch_size": args.batch_size or task.default_batch_size,
                                     "lr_schedule": args.lr_schedule})


def load_data(args: argparse.Namespace, plan: EpisodePlan) -> DataCache:
    """Load every split before the run directory exists, so a missing dataset leaves nothing behind."""
    return preload_data(args, plan.task, plan.devices, SPLITS)


def runtime_info(args: argparse.Namespace, plan: EpisodePlan) -> dict[str, Any]:
    """What the run resolved from its arguments: where its data and devices are, its augmentation and validation split,
    and the λ its reward charges."""
    return {"data_dir": str(args.data_dir), "data_source": data_source(plan.task.name, data_options(args)),
            **data_record(plan.task, plan.episode.augment),
            "devices": [str(d) for d in plan.devices],
            "telemetry_level": args.telemetry_level,
            **resolved_cost(plan.reward_family, plan.task, plan.param_cost, charge=plan.charge,
                            compute_cost=plan.compute_cost, max_train_samples=plan.episode.max_train_samples,
                            logged_only=True)}


def has_episodes(path: Path) -> bool:
    return bool(read_jsonl(path / "episodes.jsonl"))


def open_episode_run(path: Path, command: str, *, overwrite: bool, argv: list[str], config: dict[str, Any],
                     runtime: dict[str, Any], phases: Sequence[Sequence[str]], plan: EpisodePlan
                     ) -> tuple[RunDirectory, ResumePoint | None]:
    """A new run directory (config.json written), or the same command's interrupted run continued: the finished
    paired episodes are kept, the logs (events included) cut back to them, and the resume recorded."""
    if prepare_run_dir(path, command=command, overwrite=overwrite, resumable=has_episodes) == "new":
        run_dir = RunDirectory(path)
        run_dir.write_config(command, argv, config, runtime)
        return run_dir, None
    check_same_arguments(path, recorded_config(path), config, may_differ=(EPISODE_COUNT_KEY,))
    run_dir = RunDirectory(path, resume=True)
    episodes = int(config[EPISODE_COUNT_KEY])
    point = resume_point(run_dir, phases, episodes, lambda episode: paired_seeds(plan, episode)[0])
    finished = max(point.completed)
    if episodes < finished:
        raise RunDirectoryError(f"{path} already holds {finished} paired episodes: pass --episodes {finished} or "
                                f"more to continue it, or --overwrite to start over")
    trim_event_log(path / "events.jsonl", lambda event: _episode_finished(point, event))
    run_dir.record_resume(argv, config, {"from_episodes": list(point.completed)})
    console.print(f"Resuming {path}: {point.episodes_done} finished episode(s) kept "
                  f"({', '.join(f'{k}/{episodes}' for k in point.completed)} paired episodes per phase)")
    return run_dir, point


def _episode_finished(point: ResumePoint, event: dict[str, Any]) -> bool | None:
    data = event.get("data")
    if not isinstance(data, dict):
        return None
    episode = data.get("episode")
    if not isinstance(episode, int) or isinstance(episode, bool):
        return None
    return point.keeps(data.get("controller"), episode)
