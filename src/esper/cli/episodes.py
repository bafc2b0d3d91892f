"""`esper train heuristic` and `esper compare`: controllers run through the shared episode loop."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from esper.cli.common import (
    EXIT_OK,
    add_episode_options,
    add_shared_options,
    closing_hub,
    console,
    data_options,
    emit,
    make_hub,
    non_negative_float,
    open_run_dir,
    print_next_steps,
    uses_tui,
)
from esper.env.env import EnvStep, EpisodeResult, MorphoEnv
from esper.env.rewards import RewardFamily
from esper.evaluation.comparison import (
    ComparisonResult,
    ControllerSpec,
    EpisodePlan,
    check_controllers,
    run_comparison,
    run_controller_episodes,
)
from esper.leyline import LifecycleOp, TelemetryEventType, ordered_slots
from esper.runtime.checkpoint import atomic_save, model_checkpoint
from esper.runtime.devices import resolve_devices
from esper.runtime.tasks import DataCache, get_task_spec


def add_heuristic_parser(sub: Any) -> None:
    p = sub.add_parser("heuristic", help="run episodes under the rule-based HeuristicTamiyo controller")
    add_episode_options(p, episodes=1)
    p.add_argument("--reward-family", choices=[f.value for f in RewardFamily], default="contribution",
                   help="reward computed and logged per step")
    add_shared_options(p)
    p.set_defaults(func=cmd_train_heuristic)


def add_compare_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="run several controllers on identical seeds and data order")
    p.add_argument("--controllers", nargs="+", required=True, metavar="SPEC",
                   help="static, random, heuristic or ppo:PATH (checkpoint or run dir); the first is the reference")
    add_episode_options(p, episodes=5)
    p.add_argument("--devices", nargs="+", help="env devices, round-robin (default: --device)")
    p.add_argument("--tie-threshold", type=non_negative_float, default=0.5,
                   help="|Δ final accuracy| in pp counted as a tie")
    add_shared_options(p)
    p.set_defaults(func=cmd_compare)


def _plan(args: argparse.Namespace, devices: list[str] | None, reward_family: str) -> EpisodePlan:
    task = get_task_spec(args.task)
    return EpisodePlan(
        task=task, slots=ordered_slots(args.slots), max_epochs=args.max_epochs, max_seeds=args.max_seeds,
        seed=args.seed,
        devices=resolve_devices(args.device, devices), batch_size=task.default_batch_size,
        max_train_samples=args.max_train_samples, max_val_samples=args.max_val_samples, reward_family=reward_family,
    )


def _load_data(args: argparse.Namespace, plan: EpisodePlan) -> DataCache:
    """Load every split before the run directory exists, so a missing dataset leaves nothing behind."""
    cache = DataCache(data_options(args))
    cache.preload(plan.task, list(plan.devices), plan.max_train_samples, plan.max_val_samples)
    return cache


def _runtime(args: argparse.Namespace, plan: EpisodePlan) -> dict[str, Any]:
    return {"data_dir": str(args.data_dir), "devices": [str(d) for d in plan.devices],
            "telemetry_level": args.telemetry_level}


def _progress(args: argparse.Namespace) -> Progress:
    """A progress bar on a terminal, unless the live dashboard already owns it."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[status]}"), console=console,
                    disable=not sys.stdout.isatty() or uses_tui(args))


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
    plan = _plan(args, None, args.reward_family)
    cache = _load_data(args, plan)
    run_dir = open_run_dir(args, "heuristic", plan.task.name)
    config = {"task": plan.task.name, "episodes": args.episodes, "max_epochs": args.max_epochs,
              "slots": list(args.slots), "max_seeds": args.max_seeds, "seed": args.seed,
              "max_train_samples": args.max_train_samples, "max_val_samples": args.max_val_samples,
              "reward_family": args.reward_family}
    run_dir.write_config("heuristic", args.argv, config, _runtime(args, plan))
    hub = make_hub(args, run_dir, config)
    with closing_hub(hub, run_dir), _progress(args) as progress:
        emit(hub, TelemetryEventType.TRAINING_STARTED, f"heuristic on {plan.task.name}", {
            "command": "train heuristic", "task": plan.task.name, "topology": plan.task.topology, "n_envs": 1,
            "env_devices": {0: str(plan.devices[0])}, "n_episodes": args.episodes, "config": config})
        bar = progress.add_task("epochs", total=args.episodes * args.max_epochs, status="")

        def on_step(steps: list[EnvStep]) -> None:
            s = steps[0]
            stages = " ".join(f"{slot}:{r.stage.name[:5]}" for slot, r in s.env.model.get_slot_reports().items())
            progress.update(bar, advance=1, status=f"ep {s.env.spec.episode} val {s.val.val_accuracy:.1f}% "
                                                   f"loss {s.val.val_loss:.3f} {stages}")

        def save_model(episode: int, results: list[EpisodeResult], envs: list[MorphoEnv]) -> None:
            atomic_save(model_checkpoint(envs[0].model, task=plan.task.name), run_dir.checkpoints / "model_final.pt")

        results = run_controller_episodes([ControllerSpec("heuristic")], plan, args.episodes, cache, sink=hub,
                                          run_dir=run_dir, on_step=on_step, on_episode=save_model)
        emit(hub, TelemetryEventType.RUN_COMPLETED, "heuristic run completed",
             {"episodes": len(results), "final_accuracy": [r.final_accuracy for r in results]})
    console.print(_episode_table(results))
    print_next_steps(run_dir.path, tensorboard=not args.no_tensorboard)
    return EXIT_OK


def comparison_table(result: ComparisonResult) -> Table:
    ref = result.reference
    table = Table(title=f"Comparison over {result.per_controller[ref]['episodes']} episode(s) (reference: {ref})")
    for col in ("controller", "final %", "best %", "params added", "seeds c/f/x", "W/L/T vs ref", "Δ vs ref [95% CI]",
                "verdict", "action mix"):
        table.add_column(col, justify="right" if col not in ("controller", "verdict", "action mix") else "left")
    for c in result.controllers:
        s = result.per_controller[c]
        fa, ba, pa = s["final_accuracy"], s["best_accuracy"], s["params_added"]
        seeds = f"{s['seeds_created']:.1f}/{s['seeds_fossilized']:.1f}/{s['seeds_culled']:.1f}"
        mix = " ".join(f"{op.name[0]}{100 * s['action_mix'][op.name]:.0f}" for op in LifecycleOp)
        if c == ref:
            wlt, delta, verdict = "—", "—", "reference"
        else:
            p = result.pairwise[c][ref]
            wlt = f"{p['wins']}/{p['losses']}/{p['ties']}"
            delta = f"{p['mean_delta']:+.2f} [{p['ci95'][0]:+.2f}, {p['ci95'][1]:+.2f}]"
            verdict = p["verdict"]
        table.add_row(c, f"{fa['mean']:.2f} ± {fa['std']:.2f}", f"{ba['mean']:.2f} ± {ba['std']:.2f}",
                      f"{pa['mean']:,.0f}", seeds, wlt, delta, verdict, mix)
    return table


def cmd_compare(args: argparse.Namespace) -> int:
    specs = [ControllerSpec.parse(text) for text in args.controllers]
    plan = _plan(args, args.devices, RewardFamily.CONTRIBUTION.value)
    check_controllers(specs, plan)  # a checkpoint that cannot drive this setup fails before anything is written
    cache = _load_data(args, plan)
    run_dir = open_run_dir(args, "compare", plan.task.name)
    config = {"controllers": [s.label for s in specs], "task": plan.task.name, "episodes": args.episodes,
              "max_epochs": args.max_epochs, "slots": list(args.slots), "max_seeds": args.max_seeds,
              "seed": args.seed, "tie_threshold": args.tie_threshold, "max_train_samples": args.max_train_samples,
              "max_val_samples": args.max_val_samples}
    run_dir.write_config("compare", args.argv, config, _runtime(args, plan))
    hub = make_hub(args, run_dir, config)
    with closing_hub(hub, run_dir), _progress(args) as progress:
        emit(hub, TelemetryEventType.TRAINING_STARTED, f"compare on {plan.task.name}", {
            "command": "compare", "task": plan.task.name, "topology": plan.task.topology, "n_envs": len(specs),
            "env_devices": {i: str(plan.devices[i % len(plan.devices)]) for i in range(len(specs))},
            "n_episodes": args.episodes, "config": config})
        bar = progress.add_task("epochs", total=args.episodes * args.max_epochs, status="")

        def on_step(steps: list[EnvStep]) -> None:
            status = " ".join(f"{s.env.controller_name} {s.val.val_accuracy:.1f}%" for s in steps)
            progress.update(bar, advance=1, status=f"ep {steps[0].env.spec.episode}: {status}")

        result = run_comparison(specs, plan, args.episodes, cache,
                                tie_threshold=args.tie_threshold, sink=hub, run_dir=run_dir, on_step=on_step)
        emit(hub, TelemetryEventType.RUN_COMPLETED, "comparison completed", {"controllers": result.controllers})
    console.print(comparison_table(result))
    print_next_steps(run_dir.path, tensorboard=not args.no_tensorboard)
    return EXIT_OK
