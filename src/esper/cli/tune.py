"""`esper tune heuristic`: tune the heuristic's thresholds on selection seeds and save them as a record.

    esper tune heuristic --task synthetic --seeds 5 --budget 6000 --output tuned.json
    esper compare --controllers static heuristic heuristic:tuned.json --task synthetic   # rerun it, no search

Each trial runs the heuristic with thresholds drawn by optuna's TPE sampler on paired episodes of the selection
seeds (which `esper compare` and a study's evaluation never draw) and is scored against the static host on the same
seeds; trial 0 is the default heuristic. --budget is in env-epochs, like the cost of the study's best-rule search:
static and each trial cost seeds × max_epochs. Writes RUN_DIR/{static/, trials/<digest>/, candidates/, trials.md}
and the record (--output, default RUN_DIR/tuned-heuristic.json). Rerunning the same command continues an
interrupted search from its finished trials.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from pathlib import Path
from typing import Any

from esper.cli.common import EXIT_OK, USER_ERRORS, closing_hub, console, emit, make_hub, print_run_start
from esper.cli.episodes import episode_plan, load_data, open_episode_run, runtime_info
from esper.cli.options import (
    add_scale_options,
    add_setting_options,
    add_shared_options,
    add_worker_options,
    augment_choice,
    int_in,
    run_settings,
)
from esper.data.tasks import DataCache
from esper.evaluation.comparison import parse_controllers, run_comparison
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.results import ComparisonResult
from esper.evaluation.resume import EPISODE_COUNT_KEY
from esper.evaluation.run_data import data_record
from esper.evaluation.tuning import RECORD_FILE, TrialScore, TunedHeuristic, tune_heuristic
from esper.leyline import TelemetryEventType
from esper.leyline.seeding import SeedStream
from esper.storage.rundir import RunDirectory, default_run_dir, holds_results, recorded_config
from esper.storage.rundirs import check_same_arguments, discard_on_error, prepare_run_dir
from esper.tamiyo.heuristic_record import MAX_BUDGET

MAX_SEEDS = 10_000
DEFAULT_SEEDS = 5  # the reference studies' selection seeds
NOT_SETTINGS = ("output",)
"""Arguments that change where the record goes, not what the search computes."""


def add_tune_parser(sub: Any) -> None:
    tune = sub.add_parser("tune", help="tune a rule's thresholds on selection seeds")
    tune_sub = tune.add_subparsers(dest="tuned", required=True, metavar="CONTROLLER")
    p = tune_sub.add_parser("heuristic", help="tune the heuristic's thresholds (optuna TPE) and save them as a record",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_scale_options(p, defaults=("synthetic", 25))
    p.add_argument("--seeds", type=int_in(1, MAX_SEEDS), default=DEFAULT_SEEDS,
                   help=f"paired selection seeds every trial runs on (default {DEFAULT_SEEDS})")
    p.add_argument("--budget", type=int_in(1, MAX_BUDGET), required=True, metavar="ENV_EPOCHS",
                   help="env-epochs to spend, static baseline included (each trial costs seeds × max-epochs); give "
                        "the best-rule search's cost to tune at equal cost")
    p.add_argument("--output", type=Path,
                   help=f"where to save the record (default: RUN_DIR/{RECORD_FILE}); run it as heuristic:PATH")
    add_setting_options(p)
    add_worker_options(p)
    add_shared_options(p, run_dir_name=("tune", "<task>"))
    p.set_defaults(func=cmd_tune_heuristic)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in run_settings(args).items() if k not in NOT_SETTINGS}


def _phase_runner(args: argparse.Namespace, settings: dict[str, Any], cache: DataCache) -> PhaseRunner:
    """Runs (or continues) one phase of the search as a comparison in its own run directory."""

    def run(phase: Phase) -> ComparisonResult:
        config = {**settings, "controllers": phase.labels, "specs": phase.specs, EPISODE_COUNT_KEY: phase.seeds,
                  "seed_stream": phase.plan.stream.value}
        runtime = runtime_info(args, phase.plan)
        run_dir, resume = open_episode_run(phase.path, "compare", overwrite=False, argv=args.argv, config=config,
                                           runtime=runtime, phases=[phase.labels], plan=phase.plan)
        hub, progress = make_hub(args, run_dir, config)
        with closing_hub(hub, run_dir):
            emit(hub, TelemetryEventType.TRAINING_STARTED, f"{phase.name} on {phase.plan.task.name}", {
                "command": "tune heuristic", "task": phase.plan.task.name, "topology": phase.plan.task.topology,
                "n_envs": len(phase.specs), "controllers": phase.labels, "n_episodes": phase.seeds,
                "config": config, "reward": phase.plan.describe_reward(), "augmentation": runtime["augmentation"]})
            progress.start(phase.name, phase.seeds * len(phase.specs) * phase.plan.episode.max_epochs,
                           done=(resume.episodes_done if resume is not None else 0) * phase.plan.episode.max_epochs)
            return run_comparison(parse_controllers(phase.specs), phase.plan, phase.seeds, cache, sink=hub,
                                  run_dir=run_dir, labels=phase.labels, resume=resume)
    return run


def _open(path: Path, args: argparse.Namespace, settings: dict[str, Any], plan: EpisodePlan
          ) -> tuple[RunDirectory, bool]:
    """The search's directory, new or (same settings) continued; True when new. Its config.json records the data of
    the search's `plan`: its augmentation and validation split."""
    if prepare_run_dir(path, command="tune heuristic", overwrite=args.overwrite, resumable=holds_results) == "new":
        run_dir = RunDirectory(path)
        run_dir.write_config("tune heuristic", args.argv, settings, {"data_dir": str(args.data_dir),
                                                                     **data_record(plan.task, plan.episode.augment)})
        return run_dir, True
    check_same_arguments(path, recorded_config(path), settings)
    console.print(f"Resuming {path}: finished trials are reused")
    return RunDirectory(path, resume=True), False


def _print_trial(trial: TrialScore, best: TrialScore, total: int) -> None:
    console.print(f"Trial {trial.number + 1}/{total}: {trial.score:+.3f} (best {best.score:+.3f}, trial {best.number})",
                  highlight=False)


def _rerun_command(args: argparse.Namespace, record: Path) -> str:
    """The `esper compare` that runs the record beside static and the default heuristic, in its setting."""
    flags = ["--task", args.task, "--max-epochs", str(args.max_epochs)]
    for flag in ("max_train_samples", "max_val_samples", "batch_size"):
        if getattr(args, flag) is not None:
            flags += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if args.lr_schedule != "constant":
        flags += ["--lr-schedule", args.lr_schedule]
    augment = augment_choice(args)
    if augment is not None:
        flags += ["--augment", augment]
    return shlex.join(["esper", "compare", "--controllers", "static", "heuristic", f"heuristic:{record}", *flags])


def _print_result(tuned: TunedHeuristic, args: argparse.Namespace) -> None:
    """The best trial against the default heuristic (trial 0), what the search cost, and how to rerun the record."""
    summary = tuned.record.tuning
    assert summary is not None
    default = tuned.trials[0].params
    changed = {k: v for k, v in tuned.best.params.items() if default[k] != v}
    console.print(f"\nBest: trial {summary.best_trial} of {summary.trials}, {summary.objective.name} "
                  f"{summary.best_score:+.3f} (default heuristic {summary.default_score:+.3f}); cost to obtain "
                  f"{summary.cost_env_epochs:,} env-epochs, {summary.cost_gflops:,.1f} GFLOPs", highlight=False)
    console.print("Changed from the default heuristic: "
                  + (", ".join(f"{k}={v}" for k, v in changed.items()) or "none"), highlight=False)
    console.print(f"Record:  [bold]{tuned.path}[/bold]\nRerun:   {_rerun_command(args, tuned.path)}", soft_wrap=True)


def cmd_tune_heuristic(args: argparse.Namespace) -> int:
    plan = dataclasses.replace(episode_plan(args, None), stream=SeedStream.SELECTION)
    cache = load_data(args, plan)
    settings = _settings(args)
    path = args.run_dir or default_run_dir(args.runs_root, "tune", plan.task.name, args.seed, settings)
    run_dir, fresh = _open(path, args, settings, plan)
    print_run_start(path, tensorboard=False)
    with discard_on_error(run_dir, fresh=fresh, errors=USER_ERRORS):
        tuned = tune_heuristic(plan, path, args.seeds, args.budget, _phase_runner(args, settings, cache),
                               record_path=args.output, command=shlex.join(["esper", *args.argv]),
                               on_trial=_print_trial)
    _print_result(tuned, args)
    return EXIT_OK
