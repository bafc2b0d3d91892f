"""`esper train iql`: learn a controller offline from `esper datagen` datasets, then try it in live episodes.

    esper train iql --dataset runs/data --run-dir runs/iql
    esper train iql --dataset d1 d2 --epochs 20 --steps-per-epoch 500 --eval-episodes 5

Rerunning the same command continues an interrupted run from its last epoch (only `epochs` and `device` may change).
After training, `--eval-episodes` paired episodes compare static, heuristic and the IQL policy in the dataset's
setting (its task, episode length and sample caps).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from esper.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    USER_ERRORS,
    closing_hub,
    console,
    data_options,
    emit,
    make_hub,
    print_command,
    print_next_steps,
    print_run_start,
)
from esper.cli.compare import comparison_table
from esper.cli.config_flags import add_config_flags, config_from_args
from esper.cli.datagen import HEALTH_FILE
from esper.cli.options import add_shared_options, int_in, run_settings
from esper.cli.train_ppo import StopAfterStep
from esper.data.augment import parse_augment
from esper.data.tasks import DataCache, get_task_spec
from esper.datagen.loader import load_transitions
from esper.datagen.reader import MANIFEST_FILE, require_not_run_directory
from esper.env.rewards import RewardFamily
from esper.env.setting import EpisodeSetting
from esper.evaluation.comparison import parse_controllers, run_comparison
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.run_data import data_record
from esper.execution.devices import resolve_devices
from esper.leyline import ActionSpace, TelemetryEventType
from esper.leyline.errors import UserInputError
from esper.simic.iql import IQLConfig, IQLLearner, load_iql_checkpoint, train_iql
from esper.simic.iql.history import IQLHistoryRow, trim_history
from esper.storage.rundir import RunDirectory, checkpoints_dir, default_run_dir, recorded_config
from esper.storage.rundirs import check_same_arguments, discard_on_error, prepare_run_dir


def add_iql_parser(sub: Any) -> None:
    p = sub.add_parser("iql", help="train a controller offline with discrete IQL on datagen datasets",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", type=Path, nargs="+", required=True, metavar="DIR",
                   help="one or more `esper datagen` output directories")
    p.add_argument("--reward-source", choices=[f.value for f in RewardFamily], default=RewardFamily.GAP.value,
                   help="the reward family to learn from, every one recorded per decision (gap: growth's lead "
                        "over the static twin, the one the episodes ran with; the default)")
    p.add_argument("--eval-episodes", type=int_in(0, 10_000), default=2,
                   help="paired live episodes comparing static, heuristic and the IQL policy (0: skip)")
    add_config_flags(p, IQLConfig(), skip={"seed"})  # --seed: the shared option
    add_shared_options(p, seed_default=None, run_dir_name=("iql", "<task>"))
    p.set_defaults(func=cmd_train_iql)


def iql_config(args: argparse.Namespace) -> IQLConfig:
    """Defaults → --config-json → --set → flags (--seed among them)."""
    return config_from_args(IQLConfig(), args)


def dataset_settings(dirs: list[Path]) -> dict[str, Any]:
    """The generation settings the datasets share (task, episode length, sample caps, parameter cost)."""
    found = []
    for directory in dirs:
        require_not_run_directory(directory, "pass a directory written by `esper datagen --output-dir DIR`")
        path = directory / MANIFEST_FILE
        try:
            found.append(json.loads(path.read_text(encoding="utf-8"))["settings"])
        except (OSError, ValueError, KeyError, TypeError):
            raise UserInputError(f"{path} is missing or unreadable: pass directories written by "
                                 f"`esper datagen`") from None
    if any(s != found[0] for s in found):
        raise UserInputError(f"The datasets were generated with different settings ({found}): train on one setting")
    settings: dict[str, Any] = found[0]
    return settings


def failed_health_checks(directory: Path) -> list[str]:
    """The blocking checks a dataset failed, from the health report datagen saved beside it (none without one)."""
    try:
        report = json.loads((directory / HEALTH_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [name for name, check in report.items() if isinstance(check, dict) and not check.get("passed", True)
            and check.get("level") == "error"]


def check_live_setting(task: str, space: ActionSpace) -> None:
    """Before any epoch trains: the live evaluation after training needs the dataset's task and blueprint head
    registered here (a plugin's task or blueprint needs its --plugin), not only the logged transitions."""
    live = get_task_spec(task).action_space
    if live.head != space.head:
        raise UserInputError(f"The dataset's episodes use the {space.topology} blueprints {list(space.head)}, but "
                             f"this run has {list(live.head)}: pass the --plugin flags the dataset was generated "
                             f"with (and no others), or --eval-episodes 0 to train without the live evaluation")


def cmd_train_iql(args: argparse.Namespace) -> int:
    config = iql_config(args)
    settings = dataset_settings(args.dataset)
    dataset = load_transitions(args.dataset, args.reward_source)
    if args.eval_episodes:
        check_live_setting(str(settings["task"]), dataset.space)
    for directory in args.dataset:
        failed = failed_health_checks(directory)
        if failed:
            console.print(f"[yellow]warning:[/yellow] {directory} failed its health check ({', '.join(failed)}; "
                          f"see {directory / HEALTH_FILE}): a policy learned from it may not be trustworthy")
    path = args.run_dir or default_run_dir(args.runs_root, "iql", str(settings["task"]), config.seed,
                                           run_settings(args))
    record = {"config": config.to_dict(), "datasets": [str(d) for d in args.dataset], "reward_source":
              args.reward_source, "dataset_settings": settings, "eval_episodes": args.eval_episodes}
    latest = checkpoints_dir(path) / "latest.pt"
    claim = prepare_run_dir(path, command="train iql", overwrite=args.overwrite, resumable=lambda p: latest.exists())
    learner = None
    if claim == "existing":
        check_same_arguments(path, recorded_config(path), record, may_differ=("config", "eval_episodes"))
        learner = IQLLearner.from_checkpoint(load_iql_checkpoint(latest), config=config)
        run_dir = RunDirectory(path, resume=True)
        trim_history(path, latest, learner.epochs_completed)  # an epoch logged but not checkpointed is trained again
        run_dir.record_resume(args.argv, record, {"from_epoch": learner.epochs_completed})
        console.print(f"Resuming {path} from epoch {learner.epochs_completed}")
    else:
        run_dir = RunDirectory(path)
        run_dir.write_config("train iql", args.argv, record, {"data_dir": str(args.data_dir)})
    print_run_start(run_dir.path, tensorboard=not args.no_tensorboard)
    with discard_on_error(run_dir, fresh=claim == "new", errors=USER_ERRORS):
        hub, progress = make_hub(args, run_dir, config.to_dict())
        stop = StopAfterStep()
        with closing_hub(hub, run_dir):
            done = learner.epochs_completed if learner is not None else 0
            emit(hub, TelemetryEventType.TRAINING_STARTED, f"IQL on {len(dataset)} transitions", {
                "command": "train iql", "task": settings["task"], "topology": dataset.topology, "n_envs": 1,
                "transitions": len(dataset),
                "episodes": dataset.num_episodes, "config": config.to_dict()})
            progress.start("IQL", config.epochs, done=done, unit="epochs")
            started = time.perf_counter()

            def on_epoch(current: IQLLearner, metrics: dict[str, float]) -> None:
                nonlocal started
                row = IQLHistoryRow.from_metrics(metrics, time.perf_counter() - started)
                started = time.perf_counter()
                run_dir.append(IQLHistoryRow.FILE, row.to_dict())
                run_dir.sync()  # the checkpoint never counts an epoch whose row a crash could still lose
                current.save(run_dir.checkpoints / "latest.pt")
                emit(hub, TelemetryEventType.IQL_EPOCH_COMPLETED,
                     f"IQL epoch {row.epoch}/{config.epochs}: agreement {row.agreement:.2f}, "
                     f"Q(policy) {row.q_policy:+.3f} vs Q(data) {row.q_behavior:+.3f}", row.to_dict())

            with stop.installed():
                learner = train_iql(config, dataset, learner=learner, on_epoch=on_epoch,
                                    should_stop=lambda: stop.requested)
            if learner.epochs_completed < config.epochs:
                console.print(f"Stopped after epoch {learner.epochs_completed}: rerun the same command to continue.")
                return EXIT_INTERRUPTED
            final = run_dir.checkpoints / "final.pt"
            learner.save(final)
            emit(hub, TelemetryEventType.RUN_COMPLETED, "IQL training finished",
                 {"epochs": learner.epochs_completed, "checkpoint": str(final)})
    if args.eval_episodes:
        evaluate_live(args, config, settings, final, run_dir.path / "eval")
    print_next_steps(run_dir.path, tensorboard=not args.no_tensorboard,
                     plots=run_dir.path / "eval" if args.eval_episodes else None)
    print_command("Offline estimate: ", [["esper", "evaluate-offline"], ["--data", *args.dataset],
                                         ["--controller", f"iql:{final}"]])
    return EXIT_OK


def evaluate_live(args: argparse.Namespace, config: IQLConfig, settings: dict[str, Any], checkpoint: Path,
                  path: Path) -> None:
    """static, heuristic and the IQL policy on paired episodes of the dataset's setting."""
    task = get_task_spec(str(settings["task"]))
    devices = resolve_devices(config.device, None)
    episode = EpisodeSetting(task=task.name, max_epochs=int(settings["max_epochs"]),
                             max_train_samples=settings.get("max_train_samples"),
                             max_val_samples=settings.get("max_val_samples"),
                             augment=None if settings.get("augment") is None else parse_augment(settings["augment"]),
                             batch_size=task.default_batch_size)
    plan = EpisodePlan(episode=episode, seed=config.seed, devices=devices, param_cost=settings.get("param_cost"))
    cache = DataCache(data_options(args))
    specs = parse_controllers(["static", "heuristic", f"iql:{checkpoint}"])
    shutil.rmtree(path, ignore_errors=True)  # a rerun evaluates again from scratch
    run_dir = RunDirectory(path)
    run_dir.write_config("compare", args.argv, {"controllers": [s.label for s in specs], "episodes":
                                                args.eval_episodes, "dataset_settings": settings},
                         data_record(task, plan.episode.augment))
    try:
        result = run_comparison(specs, plan, args.eval_episodes, cache, run_dir=run_dir)
    finally:
        run_dir.close()
    console.print(comparison_table(result))

