"""`esper study`: train a PPO controller and compare it with its baselines on held-out paired seeds, in one command.

    esper study --preset quick                      # CPU, minutes: static, heuristic, init and final policy
    esper study --preset synthetic --seeds 10       # CPU reference study (adds static:matched and random)
    esper study --preset synthetic --ppo runs/ppo_x --controller iql:runs/iql_y   # reuse a trained policy

Rerunning the same command with the same --run-dir continues an interrupted study (training resumes from its last
checkpoint). Writes STUDY_DIR/{train/, eval/, results.json, summary.md} and plots in eval/report/.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from esper.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    add_shared_options,
    closing_hub,
    console,
    data_options,
    make_hub,
    non_negative_float,
    positive_int,
)
from esper.cli.compare import comparison_table
from esper.cli.episodes import progress_bar
from esper.cli.report import render_report
from esper.cli.train_ppo import StopAfterStep, flag_overrides, open_training_dir, train_with_stop
from esper.env import EnvStep
from esper.evaluation.study import STUDY_PRESETS, evaluation_plan, run_evaluation, study_controllers, write_study
from esper.runtime.devices import resolve_devices
from esper.runtime.rundir import RunDirectory, default_run_dir
from esper.runtime.tasks import DataCache, get_task_spec
from esper.simic.ppo.checkpoint import read_policy_checkpoint, resume_config
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import PPORun


def add_study_parser(sub: Any) -> None:
    p = sub.add_parser("study", help="train a PPO controller, then compare it with its baselines on held-out seeds",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(STUDY_PRESETS), default="quick")
    p.add_argument("--seeds", type=positive_int, help="paired held-out evaluation seeds (default: the preset's)")
    p.add_argument("--controller", action="append", default=[], metavar="SPEC",
                   help="an extra controller to compare (e.g. iql:PATH); repeatable")
    p.add_argument("--ppo", type=Path, help="evaluate this PPO run directory instead of training one")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one TrainingConfig field of the preset; VALUE is parsed as JSON (repeatable)")
    p.add_argument("--device", help="policy and env device: 'auto', 'cpu' or 'cuda:N'")
    p.add_argument("--devices", nargs="+", help="env devices, round-robin (default: --device)")
    p.add_argument("--tie-threshold", type=non_negative_float, default=0.5,
                   help="|Δ final accuracy| in pp counted as a tie")
    add_shared_options(p, seed_default=None)
    p.set_defaults(func=cmd_study, task=None, amp=None, reward_family=None, episodes=None, resume=None,
                   config_json=None)


def _training_config(args: argparse.Namespace, train_dir: Path) -> tuple[TrainingConfig, Path | None]:
    """The preset's config with the overrides, or the saved one when the run (or --ppo) already has checkpoints."""
    requested = TrainingConfig.preset(STUDY_PRESETS[args.preset].training).with_overrides(**flag_overrides(args))
    latest = train_dir / "checkpoints" / "latest.pt"
    if not latest.exists():
        if args.ppo is not None:
            raise FileNotFoundError(f"{latest} not found: --ppo needs a PPO run directory with checkpoints")
        return requested, None
    saved = TrainingConfig.from_dict(read_policy_checkpoint(latest)["config"])
    if args.ppo is not None:
        return saved, latest
    return resume_config(saved, requested), latest


def cmd_study(args: argparse.Namespace) -> int:
    preset = STUDY_PRESETS[args.preset]
    seeds = args.seeds or preset.seeds
    seed = args.seed if args.seed is not None else TrainingConfig.preset(preset.training).seed
    path = args.run_dir or default_run_dir(args.runs_root, "study", args.preset, seed)
    train_path = args.ppo if args.ppo is not None else path / "train"
    config, checkpoint = _training_config(args, train_path)
    task = get_task_spec(config.task)
    cache = DataCache(data_options(args))
    cache.preload(task, resolve_devices(config.device, config.devices), config.max_train_samples,
                  config.max_val_samples)
    rerun = (path / "config.json").exists()
    study = RunDirectory(path, resume=rerun)
    settings = {"preset": args.preset, "seeds": seeds, "controllers": args.controller, "ppo": args.ppo,
                "training": config.to_dict()}
    if not rerun:
        study.write_config("study", args.argv, settings, {"data_dir": str(args.data_dir)})
    hub = make_hub(args, study, settings)
    stop = StopAfterStep()
    with closing_hub(hub, study):
        if args.ppo is None:
            train_dir = open_training_dir(train_path, config, args, checkpoint, cache)
            try:
                result = train_with_stop(config, PPORun(train_dir, sink=hub, data=cache, resume_from=checkpoint,
                                                        should_stop=lambda: stop.requested), stop)
            finally:
                train_dir.close()
            if stop.requested or result.episodes_completed < config.n_episodes:
                console.print(f"Stopped during training. Continue with the same command (--run-dir {path}).")
                return EXIT_INTERRUPTED
        specs, labels = study_controllers(preset.baselines, train_path, args.controller)
        plan = evaluation_plan(config)
        shutil.rmtree(path / "eval", ignore_errors=True)  # an interrupted evaluation starts over
        eval_dir = RunDirectory(path / "eval")
        eval_dir.write_config("compare", args.argv, {"controllers": labels, "specs": specs, "episodes": seeds,
                                                     "first_episode": plan.first_episode, **settings}, {})
        with progress_bar(args) as progress:
            bar = progress.add_task("evaluation epochs", total=seeds * (config.max_epochs - 1), status="")

            def on_step(steps: list[EnvStep]) -> None:
                progress.update(bar, advance=1, status=" ".join(
                    f"{s.env.controller_name} {s.val.val_accuracy:.1f}%" for s in steps))

            comparison = run_evaluation(plan, specs, labels, seeds, cache, run_dir=eval_dir, sink=hub,
                                        on_step=on_step)
        eval_dir.close()
    title = f"esper study --preset {args.preset} ({config.task})"
    summary = write_study(path, comparison, title=title, command="esper " + " ".join(args.argv),
                          extra={"preset": args.preset, "seeds": seeds, "training": config.to_dict()})
    console.print(comparison_table(comparison))
    plots = render_report(path / "eval")
    console.print(f"\nStudy directory: [bold]{path}[/bold]\nSummary:         {summary}\n"
                  f"Plots:           {plots[0].parent if plots else path / 'eval' / 'report'}")
    return EXIT_OK
