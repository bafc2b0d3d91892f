"""`esper datagen`: generate an offline-RL dataset of real morphogenetic episodes under logged behaviour policies.

Examples:
    esper datagen --output-dir data/datagen_synth --task synthetic --envs baseline wide deep --episodes-per-combo 2 \\
        --max-epochs 15 --max-train-samples 512 --max-val-samples 256 --workers 2
    esper datagen --output-dir data/datagen_cifar --task cifar10 --param-cost 0.5 --devices cuda:0 --workers 4 \\
        --executor ray
    esper datagen --health-check data/datagen_synth
    esper datagen export data/datagen_synth --format minari --out esper/synthetic-v0

Rerunning the same command resumes: finished episodes are kept, failed ones are retried (up to --max-retries times,
or again with --retry-failed). Exit codes: 0 done, 3 some episodes failed permanently, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from esper.cli.common import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, console
from esper.cli.config_flags import value_type
from esper.cli.datagen_summary import print_summary
from esper.cli.options import (
    SEED,
    add_plugin_option,
    add_scale_options,
    add_worker_options,
    augment_choice,
    int_in,
    task_name,
    worker_options,
)
from esper.data.tasks import DataOptions, get_task_spec
from esper.datagen.configs import ENVIRONMENT_PRESETS, POLICY_PRESETS
from esper.datagen.export import EXPORT_FORMATS, export_minari
from esper.datagen.generate import (
    DEFAULT_MAX_EPOCHS,
    GenerateOptions,
    datagen_task_name,
    generate_episode,
    generate_twin,
)
from esper.datagen.health import DatasetHealthCheck, save_report
from esper.datagen.jobs import GenerationJobs, JobHost, generation_pool
from esper.datagen.orchestrator import GenerationOrchestrator
from esper.datagen.plans import GenerationPlan, TwinPlan, create_generation_matrix
from esper.datagen.reader import check_resumable, read_episodes
from esper.env.charges import ParamCost
from esper.execution.actors import ActorPool
from esper.execution.devices import resolve_device
from esper.execution.workers import WorkerOptions
from esper.leyline.errors import UserInputError, did_you_mean

HEALTH_FILE = "health_report.json"
EXIT_UNHEALTHY = EXIT_ERROR


def add_datagen_parser(sub: Any) -> None:
    p = sub.add_parser("datagen", help="generate an offline-RL dataset under behaviour policies",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", type=Path, help="dataset directory (created; rerun the command to resume)")
    p.add_argument("--health-check", type=Path, metavar="DIR", help="only check an existing dataset (exit 1 on "
                   "blocking problems) and save DIR/health_report.json")
    g = p.add_argument_group("matrix")
    g.add_argument("--envs", nargs="+", metavar="PRESET", help=f"environment presets (default: all "
                   f"{len(ENVIRONMENT_PRESETS)}: {', '.join(ENVIRONMENT_PRESETS)})")
    g.add_argument("--policies", nargs="+", metavar="PRESET", help=f"behaviour policy presets (default: all "
                   f"{len(POLICY_PRESETS)}: {', '.join(POLICY_PRESETS)})")
    g.add_argument("--episodes-per-combo", type=int_in(1, 1000), default=10)
    g.add_argument("--epsilon", type=float, nargs="+", metavar="EPS",
                   help="ε-greedy variants of every greedy policy (default: ε = 0 only)")
    g.add_argument("--base-seed", type=SEED, default=42,
                   help="base of the paired seeds (one per environment config and episode, shared by all policies)")
    add_scale_options(p, defaults=("cifar10", DEFAULT_MAX_EPOCHS), task_note=" (image tasks only)",
                      accept_task=lambda text: task_name(text, datagen_task_name))
    g = p.add_argument_group("episodes")
    g.add_argument("--param-cost", type=value_type(ParamCost, "param_cost"),
                   help="gap reward's cost of added parameters, pp per 100 %% "
                        "(default: the task's value measured at the nearest --max-train-samples)")
    g.add_argument("--data-dir", type=Path, default=Path("data"), help="dataset root (CIFAR-10)")
    g.add_argument("--download", action="store_true", help="download CIFAR-10 into --data-dir if it is missing")
    g = p.add_argument_group("execution")
    g.add_argument("--devices", nargs="+", default=["cpu"], help="worker i computes on devices[i mod n] (in process: "
                   "the first); Ray actors share the CUDA devices named (at most one GPU each)")
    g.add_argument("--max-retries", type=int_in(0, 100), default=2,
                   help="retries of a failed episode before giving up on it")
    g.add_argument("--force-new-matrix", action="store_true",
                   help="start over in a directory that holds another matrix's progress")
    g.add_argument("--retry-failed", action="store_true", help="retry episodes that failed permanently before")
    g.add_argument("--dry-run", action="store_true", help="print the matrix and exit")
    add_worker_options(p)
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_plugin_option(p)
    p.set_defaults(func=cmd_datagen)
    export = p.add_subparsers(dest="datagen_command", metavar="export", required=False).add_parser(
        "export", help="export a dataset (e.g. to Minari)",
        description="Export a datagen directory. Minari: observations (the features), actions (joint index), rewards "
                    "(gap), terminations, truncations, infos with the behaviour probabilities and action masks.")
    export.add_argument("directory", type=Path)
    export.add_argument("--format", choices=EXPORT_FORMATS, default="minari")
    export.add_argument("--out", required=True, help="Minari dataset id, NAMESPACE/NAME-vN (e.g. esper/synthetic-v0)")
    export.add_argument("--minari-root", type=Path, help="Minari datasets root (default: $MINARI_DATASETS_PATH or "
                        "~/.minari/datasets)")
    export.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_plugin_option(export)
    export.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    dataset = export_minari(args.directory, args.out, root=args.minari_root)
    where = Path(dataset.storage.data_path).parent  # the dataset's own folder under Minari's datasets root
    console.print(f"Wrote Minari dataset [bold]{args.out}[/bold] to [bold]{where}[/bold]"
                  + ("" if args.minari_root else " (Minari's datasets root; --minari-root DIR writes elsewhere)")
                  + f": {dataset.total_episodes} episodes, {dataset.total_steps} steps. Load it with "
                  f"minari.load_dataset('{args.out}')"
                  + (f" and MINARI_DATASETS_PATH={args.minari_root.resolve()}" if args.minari_root else ""))
    return EXIT_OK


def health_check(directory: Path) -> int:
    """Run every dataset check, print the table, save DIR/health_report.json; 1 when a check blocks."""
    checker = DatasetHealthCheck()
    results = checker.run_all(read_episodes(directory))
    checker.print_report(results, console)
    save_report(results, directory / HEALTH_FILE)
    console.print(f"Saved {directory / HEALTH_FILE}")
    return EXIT_UNHEALTHY if checker.has_blocking_errors(results) else EXIT_OK


def _check_matrix_args(args: argparse.Namespace) -> None:
    for kind, given, presets in (("environment", args.envs, ENVIRONMENT_PRESETS),
                                 ("behaviour policy", args.policies, POLICY_PRESETS)):
        unknown = [x for x in given or () if x not in presets]
        if unknown:
            hints = "".join(did_you_mean(name, presets) for name in unknown)
            raise UserInputError(f"Unknown {kind} preset(s) {', '.join(unknown)}{hints}. Available: "
                                 f"{', '.join(presets)}")
    if args.max_retries < 0:
        raise UserInputError(f"--max-retries must be >= 0, got {args.max_retries}")


def _workers(args: argparse.Namespace) -> WorkerOptions:
    workers = worker_options(args, args.devices)
    if workers.executor == "process":  # a device this machine lacks fails here once, not in every job
        for device in args.devices:
            resolve_device(device)
    return workers


def _dry_run(plans: list[GenerationPlan], options: GenerateOptions, output_dir: Path) -> int:
    twins = dict.fromkeys(p.twin for p in plans)
    console.print(f"Matrix: {len(plans)} episodes and {len(twins)} static twins; task {options.task}, "
                  f"{options.max_epochs} epochs, samples train {options.max_train_samples or 'all'} / val "
                  f"{options.max_val_samples or 'all'}, augmentation {options.settings()['augment']}, λ_p "
                  f"{options.param_cost}")
    for plan in plans[:20]:
        console.print(f"  {plan.episode_id}  seed {plan.seed}  twin {plan.twin.twin_id}")
    if len(plans) > 20:
        console.print(f"  … and {len(plans) - 20} more")
    state = "exists (a run resumes it)" if output_dir.is_dir() else "would be created"
    console.print(f"Output directory {output_dir} {state}. Dry run: nothing generated.")
    return EXIT_OK


def cmd_datagen(args: argparse.Namespace) -> int:
    if args.health_check is not None:
        if args.output_dir is not None:
            raise UserInputError("Give either --output-dir (generate) or --health-check DIR (check), not both")
        return health_check(args.health_check)
    if args.output_dir is None:
        raise UserInputError("Give --output-dir DIR to generate a dataset (or --health-check DIR to check one)")
    _check_matrix_args(args)
    options = GenerateOptions.for_task(args.task, args.param_cost, max_epochs=args.max_epochs,
                                       max_train_samples=args.max_train_samples,
                                       max_val_samples=args.max_val_samples, augment=augment_choice(args),
                                       data_dir=str(args.data_dir))
    matrix = (args.envs, args.policies, args.episodes_per_combo, args.epsilon, args.base_seed)
    plans = create_generation_matrix(*matrix)
    if args.dry_run:
        return _dry_run(plans, options, args.output_dir)
    workers = _workers(args)
    # Load (or download) the data once here, so a missing dataset fails before anything is written.
    data = DataOptions(data_dir=args.data_dir, download=args.download)
    get_task_spec(args.task).load(data, "train")
    get_task_spec(args.task).load(data, "val")
    check_resumable(args.output_dir)
    jobs = GenerationJobs(generate_episode, generate_twin, options)
    with generation_pool(workers, jobs, args.devices) as pool, GenerationOrchestrator(
            args.output_dir, *matrix, max_retries=args.max_retries, settings=options.settings(),
            force_new_matrix=args.force_new_matrix, retry_failed=args.retry_failed) as orchestrator:
        summary = _generate(orchestrator, pool)
    return _finish(args.output_dir, orchestrator, summary)


def _generate(orchestrator: GenerationOrchestrator, pool: ActorPool[JobHost]) -> dict[str, Any]:
    """Run the pending episodes with a progress bar (a terminal) or one line per episode (logs)."""
    todo, completed_before = orchestrator.remaining_count, orchestrator.completed_count
    pending = [p for p in orchestrator.plans if not orchestrator.is_complete(p.episode_id)
               and not orchestrator.is_permanently_failed(p.episode_id)]
    twins = len({p.twin for p in pending if orchestrator.load_twin(p.twin) is None})
    console.print(f"{orchestrator.total_planned} episodes planned, {orchestrator.completed_count} done, "
                  f"{todo} to generate ({twins} static twins first) in {orchestrator.output_dir}")
    start = time.monotonic()
    done = [0, 0]  # episodes finished this run, twins finished this run
    tty = sys.stdout.isatty()
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                        TextColumn("{task.fields[last]}"), console=console, disable=not tty)

    def eta() -> str:
        if done[0] == 0:
            return "ETA after the first episode"
        left = (time.monotonic() - start) / done[0] * (todo - done[0])
        return f"ETA {left / 60:.1f} min"

    def on_twin(twin: TwinPlan, error: Exception | None) -> None:
        done[1] += 1
        line = f"twin {twin.twin_id} " + ("done" if error is None else f"FAILED: {escape(str(error).splitlines()[0])}")
        if tty:
            progress.update(bar, last=line)
        else:
            console.print(f"[{done[1]}/{twins} twins] {line}", highlight=False)

    def on_episode(plan: GenerationPlan, error: Exception | None) -> None:
        done[0] += 1
        if error is None:
            line = f"{plan.episode_id} done"
        elif orchestrator.is_permanently_failed(plan.episode_id):
            line = f"{plan.episode_id} FAILED permanently: {escape(str(error).splitlines()[0])}"
        else:
            line = f"{plan.episode_id} failed (will retry): {escape(str(error).splitlines()[0])}"
        if tty:
            progress.update(bar, advance=1 if error is None or orchestrator.is_permanently_failed(plan.episode_id)
                            else 0, last=line)
        else:
            console.print(f"[{orchestrator.completed_count}/{orchestrator.total_planned}] {line} | {eta()}",
                          highlight=False)

    with progress:
        bar = progress.add_task("episodes", total=todo, last="")
        summary = orchestrator.run(pool, on_episode=on_episode, on_twin=on_twin)
    summary["wall_s"] = time.monotonic() - start
    summary["generated"] = summary["completed"] - completed_before
    return summary


def _finish(output_dir: Path, orchestrator: GenerationOrchestrator, summary: dict[str, Any]) -> int:
    """Exit 3 when episodes failed, else the health check's own status (1 when it blocks): a dataset that
    `--health-check` would fail never comes with exit 0."""
    episodes = read_episodes(output_dir) if summary["completed"] else []
    print_summary(episodes, summary, orchestrator.failures())
    health = health_check(output_dir) if episodes else EXIT_OK
    return EXIT_PARTIAL if orchestrator.failed_count else health
