"""What the episode commands (`train heuristic`, `compare`, `tune heuristic`) share: the episode plan, data loading,
and opening (or resuming) their run directory."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esper.cli.common import console, data_options, preload_data
from esper.cli.options import scale_changes, worker_options
from esper.data.readers import SPLITS
from esper.data.tasks import DataCache, data_source, get_task_spec
from esper.env.rewards import resolved_cost
from esper.env.setting import EpisodeSetting
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.resume import EPISODE_COUNT_KEY, ResumePoint, episode_event_kept, open_episode_dir, resume_line
from esper.evaluation.run_data import data_record
from esper.execution.devices import resolve_devices
from esper.nissa import trim_event_log
from esper.storage.rundir import RunDirectory


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


def open_episode_run(path: Path, command: str, *, overwrite: bool, argv: list[str], config: dict[str, Any],
                     runtime: dict[str, Any], phases: Sequence[Sequence[str]], plan: EpisodePlan
                     ) -> tuple[RunDirectory, ResumePoint | None]:
    """`open_episode_dir`, with a resumed run's event log cut back to its finished episodes and the resume printed."""
    run_dir, point = open_episode_dir(path, command, overwrite=overwrite, argv=argv, config=config, runtime=runtime,
                                      phases=phases, plan=plan)
    if point is not None:
        trim_event_log(path / "events.jsonl", episode_event_kept(point))
        console.print(resume_line(path, point, int(config[EPISODE_COUNT_KEY])))
    return run_dir, point
