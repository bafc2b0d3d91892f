"""`esper train heuristic`: run episodes under the rule-based HeuristicTamiyo controller."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from esper.cli.common import (
    EXIT_OK,
    USER_ERRORS,
    closing_hub,
    console,
    emit,
    make_hub,
    print_next_steps,
    print_run_start,
)
from esper.cli.episodes import episode_plan, load_data, open_episode_run, runtime_info
from esper.cli.options import add_episode_options, add_shared_options, add_worker_options, run_settings
from esper.env import EpisodeResult
from esper.env.driver import EnvPool
from esper.evaluation.comparison import parse_controllers
from esper.evaluation.episodes import run_controller_episodes
from esper.leyline import TelemetryEventType
from esper.storage.checkpoint import atomic_save
from esper.storage.rundir import default_run_dir
from esper.storage.rundirs import discard_on_error


def add_heuristic_parser(sub: Any) -> None:
    p = sub.add_parser("heuristic", help="run episodes under the rule-based HeuristicTamiyo controller")
    add_episode_options(p, episodes=1)
    add_worker_options(p)
    add_shared_options(p, run_dir_name=("heuristic", "<task>"))
    p.set_defaults(func=cmd_train_heuristic)


def _episode_table(results: list[EpisodeResult]) -> Table:
    table = Table(title="Episodes")
    for col in ("episode", "controller", "final %", "best %", "created", "fossilized", "culled", "params added",
                "reward"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(str(r.episode), r.controller, f"{r.final_accuracy:.2f}", f"{r.best_accuracy:.2f}",
                      str(r.seeds_created), str(r.seeds_fossilized), str(r.seeds_culled), f"{r.params_added:,}",
                      f"{r.total_reward:+.2f}")
    return table


def cmd_train_heuristic(args: argparse.Namespace) -> int:
    plan = episode_plan(args, None)
    cache = load_data(args, plan)
    config = {"task": plan.task.name, "episodes": args.episodes, "max_epochs": args.max_epochs,
              "slots": list(args.slots), "max_seeds": args.max_seeds, "seed": args.seed,
              "max_train_samples": args.max_train_samples, "max_val_samples": args.max_val_samples,
              "max_test_samples": args.max_test_samples, "batch_size": plan.episode.batch_size,
              "lr_schedule": plan.episode.lr_schedule, "augment": plan.episode.augment,
              "reward_family": args.reward_family, "param_cost": args.param_cost, "charge": args.charge,
              "compute_cost": args.compute_cost}
    runtime = runtime_info(args, plan)
    path = args.run_dir or default_run_dir(args.runs_root, "heuristic", plan.task.name, args.seed, run_settings(args))
    run_dir, resume = open_episode_run(path, "heuristic", overwrite=args.overwrite, argv=args.argv, config=config,
                                       runtime=runtime, phases=[["heuristic"]], plan=plan)
    print_run_start(run_dir.path, tensorboard=not args.no_tensorboard)
    done = resume.done(0) if resume is not None else []
    with discard_on_error(run_dir, fresh=resume is None, errors=USER_ERRORS):
        hub, progress = make_hub(args, run_dir, config)
        with closing_hub(hub, run_dir):
            emit(hub, TelemetryEventType.TRAINING_STARTED, f"heuristic on {plan.task.name}", {
                "command": "train heuristic", "task": plan.task.name, "topology": plan.task.topology, "n_envs": 1,
                "env_devices": {0: str(plan.devices[0])}, "n_episodes": args.episodes, "config": config,
                "reward": plan.describe_reward(), "augmentation": runtime["augmentation"]})
            progress.start("episodes", args.episodes * args.max_epochs, done=len(done) * args.max_epochs)

            def save_model(episode: int, results: list[EpisodeResult], models: list[dict[str, Any] | None]) -> None:
                assert models[0] is not None
                atomic_save(models[0], run_dir.checkpoints / "model_final.pt")

            with EnvPool(plan.workers, cache, role="episode worker") as pool:
                results = done + run_controller_episodes(parse_controllers(["heuristic"]), plan, args.episodes, pool,
                                                         sink=hub, run_dir=run_dir, on_episode=save_model,
                                                         keep_models=True, start=len(done))
            emit(hub, TelemetryEventType.RUN_COMPLETED, "heuristic run completed",
                 {"episodes": len(results), "final_accuracy": [r.final_accuracy for r in results]})
    console.print(_episode_table(results))
    print_next_steps(run_dir.path, tensorboard=not args.no_tensorboard, plots=run_dir.path)
    return EXIT_OK
