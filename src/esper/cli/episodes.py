"""What the episode commands (`train heuristic`, `compare`) share: the episode plan, data loading, progress."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from esper.cli.common import console, data_options, uses_tui
from esper.env.rewards import reward_config
from esper.evaluation.episodes import EpisodePlan
from esper.leyline import ordered_slots
from esper.runtime.devices import resolve_devices
from esper.runtime.tasks import DataCache, get_task_spec


def episode_plan(args: argparse.Namespace, devices: list[str] | None) -> EpisodePlan:
    """The paired-episode plan of the command line; an unusable reward setting fails here, before any work."""
    task = get_task_spec(args.task)
    reward_config(args.reward_family, task, param_cost=args.param_cost)
    return EpisodePlan(
        task=task, slots=ordered_slots(args.slots), max_epochs=args.max_epochs, max_seeds=args.max_seeds,
        seed=args.seed, devices=resolve_devices(args.device, devices), batch_size=task.default_batch_size,
        max_train_samples=args.max_train_samples, max_val_samples=args.max_val_samples,
        reward_family=args.reward_family, param_cost=args.param_cost,
    )


def load_data(args: argparse.Namespace, plan: EpisodePlan) -> DataCache:
    """Load every split before the run directory exists, so a missing dataset leaves nothing behind."""
    cache = DataCache(data_options(args))
    cache.preload(plan.task, list(plan.devices), plan.max_train_samples, plan.max_val_samples)
    return cache


def runtime_info(args: argparse.Namespace, plan: EpisodePlan) -> dict[str, Any]:
    return {"data_dir": str(args.data_dir), "devices": [str(d) for d in plan.devices],
            "telemetry_level": args.telemetry_level}


def progress_bar(args: argparse.Namespace) -> Progress:
    """A progress bar on a terminal, unless the live dashboard already owns it."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[status]}"), console=console,
                    disable=not sys.stdout.isatty() or uses_tui(args))


