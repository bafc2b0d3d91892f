"""`esper study`: train a PPO controller and compare it with its baselines on held-out paired seeds, in one command.

    esper study --preset quick                      # CPU, minutes: static, heuristic, init and final policy
    esper study --preset synthetic                  # CPU reference study: every baseline, 20 evaluation seeds
    esper study --preset synthetic --ppo runs/ppo_x --controller iql:runs/iql_y   # reuse a trained policy
    esper study --preset synthetic --blueprints-from-selection   # the policy grows only best-fixed's blueprints

A study chooses best-fixed (`fixed:` hosts) and best-rule (scripted behaviour presets and `grow:` rules) by validation
accuracy on selection seeds, in greedy rounds: every single module first, then the best of each family with one
module more while that helps (selection/round-N/); it trains the policy (train/), then
evaluates everything on paired evaluation seeds disjoint from both (eval/), reporting final test accuracy: the test
split is scored once per final model and seen by nothing that decides. With --blueprints-from-selection the policy
may germinate only the blueprints of the chosen best-fixed: selection answers *what* to build, the policy learns
*when* and *where* to grow it.

Rerunning the same command with the same --run-dir continues an interrupted study: training resumes from its last
checkpoint and selection and evaluation from their finished paired episodes (an evaluation of a policy that has
since trained further starts over). Other arguments are refused; --overwrite starts the study over. Writes
STUDY_DIR/{selection/round-N/, train/, eval/, results.json, summary.md} and plots in eval/report/; each phase's
directory is a complete run directory (its own events and TensorBoard logs), so each can be reported and resumed on
its own.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    USER_ERRORS,
    WORKER_FIELDS,
    add_shared_options,
    add_worker_options,
    closing_hub,
    console,
    emit,
    float_in,
    int_in,
    make_hub,
    phase_progress,
    preload_data,
    run_settings,
)
from esper.cli.compare import comparison_table
from esper.cli.episodes import open_episode_run
from esper.cli.param_cost import resolve_auto_param_cost
from esper.cli.report import render_report
from esper.cli.rundirs import check_same_arguments, discard_on_error, prepare_run_dir
from esper.cli.train_ppo import StopAfterStep, flag_overrides, open_training_dir, train_with_stop
from esper.env.rewards import resolved_param_cost
from esper.evaluation.comparison import comparison_phases, parse_controllers
from esper.evaluation.episodes import EpisodePlan, one_test_sample
from esper.evaluation.results import ComparisonResult
from esper.evaluation.study import (
    BEST_FIXED,
    BEST_RULE,
    FINAL,
    STUDY_PRESETS,
    choose_best,
    chosen_blueprints,
    evaluation_plan,
    greedy_extensions,
    run_evaluation,
    selection_candidates,
    selection_markdown,
    study_controllers,
    write_study,
)
from esper.leyline import TelemetryEventType
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import SeedStream
from esper.runtime.devices import resolve_devices
from esper.runtime.readers import SPLITS
from esper.runtime.rundir import (
    RunDirectory,
    RunDirectoryError,
    checkpoints_dir,
    default_run_dir,
    holds_results,
    recorded_config,
    write_text_atomic,
)
from esper.runtime.tasks import DataCache, get_task_spec
from esper.simic.ppo.checkpoint import read_policy_checkpoint, resume_config
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.train import PPORun

MAX_STUDY_SEEDS = 10_000


def add_study_parser(sub: Any) -> None:
    p = sub.add_parser("study", help="train a PPO controller, then compare it with its baselines on held-out seeds",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(STUDY_PRESETS), default="quick")
    p.add_argument("--seeds", type=int_in(1, MAX_STUDY_SEEDS),
                   help="paired held-out evaluation seeds (default: the preset's)")
    p.add_argument("--selection-seeds", type=int_in(0, MAX_STUDY_SEEDS),
                   help="seeds that choose best-fixed and best-rule; 0 skips them (default: the preset's)")
    p.add_argument("--max-test-samples", type=int_in(1, 10**9),
                   help="score final models on a subset of the test split (default: all of it)")
    p.add_argument("--controller", action="append", default=[], metavar="SPEC",
                   help="an extra controller to compare (e.g. iql:PATH); repeatable")
    p.add_argument("--allow-setting-change", action="store_true",
                   help="let --controller policies run in another task, episode length or caps than they learned in")
    p.add_argument("--ppo", type=Path, help="evaluate this PPO run directory instead of training one")
    p.add_argument("--blueprints-from-selection", action="store_true",
                   help="train the policy to germinate only the blueprints of the chosen best-fixed")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one TrainingConfig field of the preset; VALUE is parsed as JSON (repeatable)")
    p.add_argument("--device", help="policy and env device: 'auto', 'cpu' or 'cuda:N'")
    p.add_argument("--devices", nargs="+", help="env devices, round-robin (default: --device)")
    p.add_argument("--tie-threshold", type=float_in(0.0, 100.0),
                   help="|Δ final accuracy| in pp below which a paired difference is a tie (default: one test sample)")
    add_worker_options(p)
    add_shared_options(p, seed_default=None)
    p.set_defaults(func=cmd_study, task=None, amp=None, reward_family=None, episodes=None, resume=None,
                   config_json=None)


_PLACEMENT = ("device", "devices", *WORKER_FIELDS.values())
"""Overrides that change where a study runs, not what it measures."""


def _training_config(args: argparse.Namespace, train_dir: Path, blueprints: list[str] | None = None
                     ) -> tuple[TrainingConfig, Path | None]:
    """The preset's config with the overrides (and `blueprints`, once selection has chosen them), or the saved one
    when the run (or --ppo) already has checkpoints (ignored under --overwrite, which starts the study over)."""
    overrides = flag_overrides(args)
    if args.blueprints_from_selection and "blueprints" in overrides:
        raise UserInputError("--blueprints-from-selection takes the policy's blueprints from best-fixed: drop "
                             "--set blueprints=... or the flag")
    if blueprints is not None:
        overrides["blueprints"] = blueprints
    requested = TrainingConfig.preset(STUDY_PRESETS[args.preset].training).with_overrides(**overrides)
    latest = checkpoints_dir(train_dir) / "latest.pt"
    if args.ppo is not None and not args.ppo.is_dir():
        raise FileNotFoundError(f"--ppo {args.ppo} is not a directory: pass a PPO run directory (holding "
                                f"checkpoints/init.pt and final.pt)")
    setting = sorted(k for k in overrides if k not in _PLACEMENT)
    if args.ppo is not None and setting:
        raise UserInputError(f"--ppo evaluates the policy in the setting it trained in, so {', '.join(setting)} cannot "
                             f"be changed; to test it elsewhere run esper compare --controllers static heuristic "
                             f"ppo:{args.ppo}/checkpoints/init.pt ppo:{args.ppo} with the settings you want")
    requested = resolve_auto_param_cost(requested, args)
    if not latest.exists() or (args.overwrite and args.ppo is None):
        if args.ppo is not None:
            raise FileNotFoundError(f"{latest} not found: --ppo needs a PPO run directory with checkpoints")
        return requested, None
    saved = TrainingConfig.from_dict(read_policy_checkpoint(latest)["config"])
    if args.ppo is not None:
        return saved.with_overrides(**overrides), latest  # only where it runs may change
    if args.blueprints_from_selection and blueprints is None:  # before selection: check everything else
        requested = requested.with_overrides(blueprints=saved.blueprints)
    return resume_config(saved, requested), latest


def _measured_setting(config: TrainingConfig) -> dict[str, Any]:
    """The training config without where its envs ran (workers change the wall time, not a single number), with
    the λ_p its reward charged in place of the null that means "the task's"."""
    setting = {k: v for k, v in config.to_dict().items() if k not in WORKER_FIELDS.values()}
    setting["param_cost"] = resolved_param_cost(config.reward_family, get_task_spec(config.task),
                                                config.charged_param_cost(), max_train_samples=config.max_train_samples)
    return setting


def _settings(args: argparse.Namespace, seeds: int, selection_seeds: int) -> dict[str, Any]:
    return {"preset": args.preset, "seeds": seeds, "selection_seeds": selection_seeds, "controllers": args.controller,
            "ppo": None if args.ppo is None else str(args.ppo), "tie_threshold": args.tie_threshold,
            "max_test_samples": args.max_test_samples, "blueprints_from_selection": args.blueprints_from_selection}


def _open_study(path: Path, args: argparse.Namespace, settings: dict[str, Any]) -> tuple[RunDirectory, bool]:
    """The study directory, new or (same settings; more seeds allowed) continued; True when new."""
    if prepare_run_dir(path, command="study", overwrite=args.overwrite, resumable=holds_results) == "new":
        study = RunDirectory(path)
        study.write_config("study", args.argv, settings, {"data_dir": str(args.data_dir)})
        return study, True
    check_same_arguments(path, recorded_config(path), settings, may_differ=("seeds",))
    return RunDirectory(path, resume=True), False


def _train(args: argparse.Namespace, config: TrainingConfig, checkpoint: Path | None, train_path: Path,
           cache: DataCache) -> bool:
    """Train (or continue training) the policy in train/, with that directory's own telemetry (so a resume trims
    its own events); False when stopped before the last batch."""
    episodes_done = int(read_policy_checkpoint(checkpoint)["episodes_completed"]) if checkpoint is not None else 0
    train_dir = open_training_dir(train_path, config, args, checkpoint, cache)
    hub, progress = make_hub(args, train_dir, config.to_dict())
    stop = StopAfterStep()
    with closing_hub(hub, train_dir):
        run = PPORun(train_dir, sink=hub, data=cache, resume_from=checkpoint, should_stop=lambda: stop.requested,
                     progress=phase_progress(progress))
        result = train_with_stop(config, run, stop, progress,
                                 preset=STUDY_PRESETS[args.preset].training,
                                 debug=args.telemetry_level == "debug", episodes_done=episodes_done)
    return not stop.requested and result.episodes_completed >= config.n_episodes


def _evaluation_config(path: Path, labels: list[str], specs: list[str], seeds: int, stream: SeedStream,
                       config: TrainingConfig, settings: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A phase's arguments, and whether a stored phase was of something else (then it starts over: its results
    describe a policy, a choice or a setting that no longer exists)."""
    eval_config = {"controllers": labels, "specs": specs, "episodes": seeds, "seed_stream": stream.value,
                   "training": _measured_setting(config),
                   **{k: v for k, v in settings.items() if k not in ("seeds", "selection_seeds")}}
    if not (path / "config.json").exists():
        return eval_config, False
    try:
        check_same_arguments(path, recorded_config(path), eval_config,
                             may_differ=("episodes",))
    except RunDirectoryError:
        return eval_config, True
    return eval_config, False


@dataclass(frozen=True)
class _Phase:
    """One paired-episode phase of a study (selection or evaluation), run in its own directory."""

    name: str
    path: Path
    plan: EpisodePlan
    specs: list[str]
    labels: list[str]
    seeds: int
    match: str | None = None


def _run_phase(args: argparse.Namespace, phase: _Phase, config: TrainingConfig, settings: dict[str, Any],
               cache: DataCache) -> ComparisonResult:
    """Run (or continue) one phase with its own telemetry and progress."""
    phases = comparison_phases(parse_controllers(phase.specs), phase.labels)
    phase_config, stale = _evaluation_config(phase.path, phase.labels, phase.specs, phase.seeds,
                                             phase.plan.stream, config, settings)
    run_dir, resume = open_episode_run(phase.path, "compare", overwrite=stale, argv=args.argv, config=phase_config,
                                       runtime={"data_dir": str(args.data_dir),
                                                "param_cost": phase_config["training"]["param_cost"]}, phases=phases,
                                       plan=phase.plan)
    tie = args.tie_threshold if args.tie_threshold is not None else one_test_sample(phase.plan, cache)
    hub, progress = make_hub(args, run_dir, phase_config)
    with closing_hub(hub, run_dir):
        emit(hub, TelemetryEventType.TRAINING_STARTED, f"study {phase.name} on {config.task}", {
            "command": f"study {phase.name}", "task": config.task, "topology": phase.plan.task.topology,
            "n_envs": len(phase.specs), "controllers": phase.labels, "n_episodes": phase.seeds,
            "config": phase_config, "reward": phase.plan.describe_reward()})
        progress.start(phase.name, phase.seeds * len(phase.specs) * config.max_epochs, round_size=len(phases[0]),
                       done=(resume.episodes_done if resume is not None else 0) * config.max_epochs)
        return run_evaluation(phase.plan, phase.specs, phase.labels, phase.seeds, cache, run_dir=run_dir, sink=hub,
                              resume=resume, match=phase.match, tie_threshold=tie)


def _select(args: argparse.Namespace, path: Path, config: TrainingConfig, settings: dict[str, Any],
            cache: DataCache, seeds: int) -> dict[str, str]:
    """best-fixed and best-rule, chosen on the selection seeds in greedy rounds (selection/round-N/, each a run
    directory of its own); the table of every round is saved as selection/summary.md."""
    if seeds == 0:
        return {}
    # Nothing selection runs is the policy's, so it is recorded without the policy's blueprints: the same selection
    # serves a study before and after --blueprints-from-selection has made its choice.
    config = config.with_overrides(blueprints=None)
    plan = evaluation_plan(config, SeedStream.SELECTION, args.max_test_samples)
    topology, slots = plan.task.topology, plan.slots
    fixed, rules = selection_candidates(topology, slots)
    max_modules = plan.max_seeds or len(slots)
    candidates = [*fixed, *rules]
    rounds: list[ComparisonResult] = []
    means: dict[str, float] = {}
    while candidates:
        n = len(rounds) + 1
        rounds.append(_run_phase(args, _Phase(f"selection round {n}", path / f"round-{n}", plan, candidates,
                                              candidates, seeds), config, settings, cache))
        means.update({c: rounds[-1].per_controller[c]["final_accuracy"]["mean"] for c in candidates})
        more_fixed, more_rules = (greedy_extensions(means, family, candidates, topology, slots, max_modules)
                                  for family in (fixed, rules))
        fixed, rules, candidates = [*fixed, *more_fixed], [*rules, *more_rules], [*more_fixed, *more_rules]
    chosen = {BEST_FIXED: choose_best(means, fixed), BEST_RULE: choose_best(means, rules)}
    write_text_atomic(path / "summary.md", selection_markdown(rounds, chosen))
    return chosen


def cmd_study(args: argparse.Namespace) -> int:
    preset = STUDY_PRESETS[args.preset]
    seeds = args.seeds or preset.seeds
    selection_seeds = preset.selection_seeds if args.selection_seeds is None else args.selection_seeds
    seed = args.seed if args.seed is not None else TrainingConfig.preset(preset.training).seed
    path = args.run_dir or default_run_dir(args.runs_root, "study", args.preset, seed, run_settings(args))
    settings = _settings(args, seeds, selection_seeds)
    train_path = args.ppo if args.ppo is not None else path / "train"
    if args.blueprints_from_selection and (args.ppo is not None or selection_seeds == 0):
        raise UserInputError("--blueprints-from-selection trains the policy on best-fixed's blueprints, so it needs "
                             "selection seeds (not --selection-seeds 0) and a policy to train (not --ppo)")
    config, checkpoint = _training_config(args, train_path)  # bad settings fail before anything is written
    cache = preload_data(args, get_task_spec(config.task), resolve_devices(config.device, config.devices), SPLITS)
    study, fresh = _open_study(path, args, settings)
    with discard_on_error(study, fresh=fresh, errors=USER_ERRORS):
        chosen = _select(args, path / "selection", config, settings, cache, selection_seeds)
        if args.blueprints_from_selection:
            config, checkpoint = _training_config(args, train_path, chosen_blueprints(chosen[BEST_FIXED]))
        if args.ppo is None and not _train(args, config, checkpoint, train_path, cache):
            console.print(f"Stopped during training. Continue with the same command (--run-dir {path}).")
            return EXIT_INTERRUPTED
        specs, labels = study_controllers(preset.baselines, train_path, chosen, args.controller)
        plan = evaluation_plan(config, max_test_samples=args.max_test_samples,
                               allow_setting_change=args.allow_setting_change)
        match = FINAL if "static:matched" in preset.baselines else None
        comparison = _run_phase(args, _Phase("evaluation", path / "eval", plan, specs, labels, seeds, match),
                                config, settings, cache)
    reward = plan.describe_reward()
    title = f"esper study --preset {args.preset} ({config.task}; reward {reward})"
    summary = write_study(path, comparison, title=title, command="esper " + " ".join(args.argv), chosen=chosen,
                          policy_blueprints=config.blueprints,
                          extra={"preset": args.preset, "seeds": seeds, "selection_seeds": selection_seeds,
                                 "reward": reward, "training": _measured_setting(config)})
    console.print(comparison_table(comparison))
    plots = render_report(path / "eval")
    console.print(f"\nStudy directory: [bold]{path}[/bold]\nSummary:         {summary}\n"
                  f"Plots:           {plots[0].parent if plots else path / 'eval' / 'report'}")
    if not args.no_tensorboard:
        console.print(f"TensorBoard:     tensorboard --logdir {path}")
    return EXIT_OK
