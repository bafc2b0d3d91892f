"""`esper compare`: several controllers on identical seeds and data order, with paired statistics."""

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
from esper.cli.options import add_episode_options, add_shared_options, add_worker_options, float_in, run_settings
from esper.evaluation.comparison import (
    ComparisonResult,
    check_controllers,
    comparison_phases,
    controller_labels,
    parse_controllers,
    run_comparison,
)
from esper.evaluation.controllers import all_controllers
from esper.leyline import TelemetryEventType
from esper.leyline.errors import UserInputError, did_you_mean
from esper.storage.rundir import default_run_dir
from esper.storage.rundirs import discard_on_error


def add_compare_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="run several controllers on identical seeds and data order")
    p.add_argument("--controllers", nargs="+", required=True, metavar="SPEC",
                   help=f"registered controllers ({', '.join(all_controllers().usages())}); the first is the reference")
    add_episode_options(p, episodes=5)
    p.add_argument("--devices", nargs="+", help="env devices, round-robin (default: --device)")
    p.add_argument("--match", metavar="LABEL",
                   help="widen static:matched to this controller's parameters (default: the largest grown one)")
    p.add_argument("--allow-setting-change", action="store_true",
                   help="run learned policies (ppo:, iql:) in another task, episode length or sample caps than they "
                        "were trained in (refused by default)")
    p.add_argument("--tie-threshold", type=float_in(0.0, 100.0),
                   help="|Δ final accuracy| in pp below which a paired difference is a tie (default: one test sample)")
    add_worker_options(p)
    add_shared_options(p, run_dir_name=("compare", "<task>"))
    p.set_defaults(func=cmd_compare)


VERDICTS = {"no significant difference": "n.s.", "reference": "ref"}
"""Short verdicts, so the table fits 80 columns; the caption spells them out."""


def comparison_table(result: ComparisonResult) -> Table:
    """Per controller: final test and validation accuracy, parameters, seeds fossilized/created, and the paired Δ
    against the reference on the primary metric (test accuracy when every episode has a test score), under an
    "incomplete: k of n paired episodes" line while the run is unfinished. Controller names are never cut (other
    cells wrap instead), so the table reads at 80 columns."""
    ref = result.reference
    pairs = [result.pairwise[c][ref] for c in result.controllers if c != ref]
    metric = "test" if not pairs or pairs[0]["metric"] == "test_accuracy" else "val"
    note = result.incomplete_note()
    table = Table(title=("" if note is None else f"{note}\n")
                  + f"{result.per_controller[ref]['episodes']} paired episode(s); Δ: final {metric} accuracy vs "
                    f"{ref} (pp, 95% t-interval)",
                  caption="f/c: seeds fossilized/created per episode; W/L/T: wins/losses/ties; n.s.: no significant "
                          "difference (the interval holds 0, or |Δ| is below one sample)",
                  box=None, padding=(0, 1, 0, 0), header_style="bold underline")
    table.add_column("controller", no_wrap=True, min_width=max(len(c) for c in result.controllers))
    for col in ("test%", "val%", "params", "f/c", f"Δ {metric}", "95% CI", "W/L/T"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True, min_width=7)
    for c in result.controllers:
        s = result.per_controller[c]
        test = s["final_test_accuracy"]
        seeds = f"{s['seeds_fossilized']:.1f}/{s['seeds_created']:.1f}"
        if c == ref:
            wlt, delta, ci, verdict = "—", "—", "", "reference"
        else:
            p = result.pairwise[c][ref]
            wlt = f"{p['wins']}/{p['losses']}/{p['ties']}"
            delta, ci = f"{p['mean_delta']:+.2f}", f"[{p['ci95'][0]:+.2f},{p['ci95'][1]:+.2f}]"
            verdict = p["verdict"]
        table.add_row(c, "—" if test is None else f"{test['mean']:.2f}", f"{s['final_accuracy']['mean']:.2f}",
                      f"{s['total_params']['mean']:,.0f}", seeds, delta, ci, wlt, VERDICTS.get(verdict, verdict))
    return table


def cmd_compare(args: argparse.Namespace) -> int:
    specs = parse_controllers(args.controllers)
    labels = controller_labels(specs)
    plan = episode_plan(args, args.devices, allow_setting_change=args.allow_setting_change)
    check_controllers(specs, plan)  # a checkpoint that cannot drive this setup fails before anything is written
    phases = comparison_phases(specs, labels)
    if args.match is not None and len(phases) == 1:
        raise UserInputError("--match widens static:matched, which is not among the controllers: add static:matched")
    if args.match is not None and args.match not in phases[0]:  # static:matched cannot be matched to itself
        raise UserInputError(f"--match {args.match}: no such controller to match{did_you_mean(args.match, phases[0])}. "
                             f"Available: {phases[0]}")
    cache = load_data(args, plan)
    config = {"controllers": labels, "specs": [s.label for s in specs], "task": plan.task.name,
              "episodes": args.episodes, "max_epochs": args.max_epochs, "slots": list(args.slots),
              "max_seeds": args.max_seeds, "seed": args.seed, "tie_threshold": args.tie_threshold,
              "max_train_samples": args.max_train_samples, "max_val_samples": args.max_val_samples,
              "max_test_samples": args.max_test_samples, "batch_size": plan.episode.batch_size,
              "lr_schedule": plan.episode.lr_schedule, "augment": plan.episode.augment,
              "reward_family": args.reward_family, "param_cost": args.param_cost, "charge": args.charge,
              "compute_cost": args.compute_cost, "match": args.match}
    runtime = runtime_info(args, plan)
    path = args.run_dir or default_run_dir(args.runs_root, "compare", plan.task.name, args.seed, run_settings(args))
    run_dir, resume = open_episode_run(path, "compare", overwrite=args.overwrite, argv=args.argv, config=config,
                                       runtime=runtime, phases=phases, plan=plan)
    print_run_start(run_dir.path, tensorboard=not args.no_tensorboard)
    with discard_on_error(run_dir, fresh=resume is None, errors=USER_ERRORS):
        hub, progress = make_hub(args, run_dir, config)
        with closing_hub(hub, run_dir):
            emit(hub, TelemetryEventType.TRAINING_STARTED, f"compare on {plan.task.name}", {
                "command": "compare", "task": plan.task.name, "topology": plan.task.topology,
                "n_envs": len(specs), "controllers": labels,
                "env_devices": {i: str(plan.devices[i % len(plan.devices)]) for i in range(len(specs))},
                "n_episodes": args.episodes, "config": config, "reward": plan.describe_reward(),
                "augmentation": runtime["augmentation"]})
            progress.start("paired episodes", args.episodes * len(specs) * args.max_epochs, round_size=len(phases[0]),
                           done=(resume.episodes_done if resume is not None else 0) * args.max_epochs)
            result = run_comparison(specs, plan, args.episodes, cache, tie_threshold=args.tie_threshold, sink=hub,
                                    run_dir=run_dir, labels=labels, resume=resume,
                                    match=None if args.match is None else [args.match])
            emit(hub, TelemetryEventType.RUN_COMPLETED, "comparison completed", {"controllers": result.controllers})
    console.print(comparison_table(result))
    print_next_steps(run_dir.path, tensorboard=not args.no_tensorboard, plots=run_dir.path)
    return EXIT_OK
