"""`esper study`: train K PPO controllers and compare them with every baseline on held-out paired seeds, in one
command.

    esper study --preset quick                      # CPU, minutes: the workflow end to end (a demo, not a result)
    esper study --preset synthetic                  # CPU reference study: 5 training runs, every baseline
    esper study --preset synthetic --runs 2         # fewer training runs
    esper study --preset synthetic --ppo runs/a runs/b --controller iql:runs/iql_y   # reuse trained policies
    esper study --preset synthetic --blueprints-from-selection   # the policies grow only best-fixed's blueprints

A study chooses best-fixed (`fixed:` hosts) and best-rule (scripted behaviour presets and `grow:` rules) by validation
accuracy on selection seeds, in greedy rounds: every single module first, then the best of each family with one
module more while that helps (selection/round-N/). It trains K policies, each on its own training seed stream
(train/run-<r>/), runs each final policy on the selection seeds to read its open-loop replay from
(replay-source/run-<r>/), then evaluates everything on paired evaluation seeds disjoint from all of these (eval/),
reporting final test accuracy: the test split is scored once per final model and seen by nothing that decides. It
states first whether the static host converged and how much headroom width and best-fixed have, then each run's
policy against its init, its replay and the baselines, the aggregates over runs, and the static frontier at equal
training compute and parameters. With --blueprints-from-selection the policies may germinate only the blueprints of
the chosen best-fixed: selection answers *what* to build, the policy learns *when* and *where* to grow it.

Rerunning the same command with the same --run-dir continues an interrupted study: each training run resumes from
its last checkpoint, and selection, replay sources and evaluation from their finished paired episodes (an evaluation
of other runs starts over, and says so). A study directory copied elsewhere continues there (the same command with
the new --run-dir); moved, too, unless its policies learned from its tuned heuristic, whose record their checkpoints
name by its old path. Other arguments are refused, and so is a phase recorded in another setting (naming the
difference): finished episodes are never thrown away unasked; --overwrite starts the study over. Writes
STUDY_DIR/{selection/round-N/, train/run-<r>/, replay-source/run-<r>/, eval/, results.json, summary.md} and plots in
report/; each phase's directory is a complete run directory (its own events and TensorBoard logs), so each can be
reported and resumed on its own.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from esper.cli.common import EXIT_INTERRUPTED, EXIT_OK, console, data_options, print_command
from esper.cli.compare import comparison_table
from esper.cli.family_study import __doc__ as family_doc
from esper.cli.family_study import print_family_result
from esper.cli.options import (
    add_scale_options,
    add_shared_options,
    add_worker_options,
    float_in,
    int_in,
    one_of,
    run_settings,
)
from esper.cli.study_output import console_hooks
from esper.cli.train_ppo import StopAfterStep, flag_overrides
from esper.data.families import FAMILIES
from esper.evaluation.selection_record import SELECTION_RECORD_FILE
from esper.evaluation.studies import StudyHooks, StudyPlan, StudyResult, StudyStatus, run_study
from esper.evaluation.studies.plan import MAX_RUNS, MAX_STUDY_SEEDS
from esper.evaluation.study import STUDY_PRESETS
from esper.evaluation.study_report import convergence_line, demo_note
from esper.report.render import render_report


def add_study_parser(sub: Any) -> None:
    p = sub.add_parser("study", help="train K PPO controllers, then compare them with every baseline on held-out seeds",
                       description=f"{__doc__}\n{family_doc}", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", type=one_of(STUDY_PRESETS, "study preset"), choices=sorted(STUDY_PRESETS),
                   help="the study's setting and size (default: quick)")
    p.add_argument("--family", type=one_of(FAMILIES, "family"), choices=sorted(FAMILIES),
                   help="a study across a task family's instance types, beginning with its pre-check (see below)")
    p.add_argument("--ignore-precheck", action="store_true",
                   help="with --family: go on where the pre-check finds too little for a per-run controller to win")
    p.add_argument("--runs", type=int_in(1, MAX_RUNS),
                   help="training runs, each on its own training seed stream (default: the preset's)")
    p.add_argument("--seeds", type=int_in(1, MAX_STUDY_SEEDS),
                   help="paired held-out evaluation seeds (default: the preset's)")
    p.add_argument("--selection-seeds", type=int_in(0, MAX_STUDY_SEEDS),
                   help="seeds that choose best-fixed and best-rule and that replays are read from; 0 skips the "
                        "selection (default: the preset's)")
    add_scale_options(p, defaults=None)
    p.add_argument("--max-test-samples", type=int_in(1, 10**9),
                   help="score final models on a subset of the test split (default: all of it)")
    p.add_argument("--baselines", nargs="+", metavar="SPEC",
                   help="evaluate these untrained controllers instead of the preset's baselines (static among them), "
                        "e.g. an ablation arm's `--baselines static`: best-fixed, best-rule, heuristic:tuned and the "
                        "teacher still run")
    p.add_argument("--controller", action="append", default=[], metavar="SPEC",
                   help="an extra controller to compare (e.g. iql:PATH); repeatable")
    p.add_argument("--allow-setting-change", action="store_true",
                   help="let --controller policies run in another task, episode length or caps than they learned in")
    p.add_argument("--ppo", type=Path, nargs="+", metavar="RUN",
                   help="evaluate these PPO run directories (one training run each) instead of training")
    p.add_argument("--selection-record", type=Path, metavar="FILE",
                   help="reuse the selection (best-fixed, best-rule, heuristic:tuned and the teacher's choice) that "
                        "a study of the same preset and selection seeds (at any --seed) recorded in FILE, its cost "
                        "still counted")
    p.add_argument("--selection-only", action="store_true",
                   help=f"run the selection and the teacher's choice, write STUDY_DIR/{SELECTION_RECORD_FILE} and "
                        f"stop (a later run of the same command continues the study)")
    p.add_argument("--blueprints-from-selection", action="store_true",
                   help="train the policies to germinate only the blueprints of the chosen best-fixed")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one TrainingConfig setting of the preset (by its name or dotted key); VALUE is "
                        "parsed as JSON (repeatable)")
    p.add_argument("--device", help="policy and env device: 'auto', 'cpu' or 'cuda:N'")
    p.add_argument("--devices", nargs="+", help="env devices, round-robin (default: --device)")
    p.add_argument("--tie-threshold", type=float_in(0.0, 100.0),
                   help="|Δ final accuracy| in pp below which a paired difference is a tie (default: one test sample)")
    add_worker_options(p)
    add_shared_options(p, seed_default=None, run_dir_name=("study", "<task>"))
    p.set_defaults(func=cmd_study, resume=None, config_json=None)  # effective_config reads them


def study_plan(args: argparse.Namespace, hooks: StudyHooks) -> StudyPlan:
    """The study the flags ask for. Its default directory is named by the arguments as every command's is (a
    single-task study by its preset, quick where none is given, and not by --selection-only: how far, not what)."""
    named = {k: v for k, v in run_settings(args).items() if k != "baselines" or v is not None}  # names kept
    if args.family is None:
        named = {**{k: v for k, v in named.items() if k != "selection_only"}, "preset": args.preset or "quick"}
    return StudyPlan(
        preset=args.preset, family=args.family, overrides=flag_overrides(args), runs=args.runs, seeds=args.seeds,
        selection_seeds=args.selection_seeds,
        baselines=None if args.baselines is None else tuple(args.baselines), controllers=tuple(args.controller),
        allow_setting_change=args.allow_setting_change, ppo=None if args.ppo is None else tuple(args.ppo),
        selection_record=args.selection_record, selection_only=args.selection_only,
        blueprints_from_selection=args.blueprints_from_selection, ignore_precheck=args.ignore_precheck,
        tie_threshold=args.tie_threshold, max_test_samples=args.max_test_samples, run_dir=args.run_dir,
        runs_root=args.runs_root, named_by=named, overwrite=args.overwrite, data=data_options(args),
        plugins=tuple(args.plugin), argv=tuple(args.argv), hooks=hooks)


def cmd_study(args: argparse.Namespace) -> int:
    result = run_study(study_plan(args, console_hooks(args, StopAfterStep())))
    if args.family is not None:
        return print_family_result(result)
    return _print_result(args, result)


def _print_result(args: argparse.Namespace, result: StudyResult) -> int:
    path = result.path
    if result.status == StudyStatus.SELECTION_ONLY:
        console.print(f"Selection recorded in {path / SELECTION_RECORD_FILE}. Continue the study with the same "
                      f"command without --selection-only, or reuse it in another study with --selection-record "
                      f"{path / SELECTION_RECORD_FILE}.", soft_wrap=True, highlight=False)
        return EXIT_OK
    if result.status == StudyStatus.STOPPED:
        console.print(f"Stopped during {result.phase}. Continue with the same command (--run-dir {path}).")
        return EXIT_INTERRUPTED
    assert result.comparison is not None and result.results is not None
    console.print(comparison_table(result.comparison))
    console.print(("[bold]" if result.results.regime["convergence"]["converged"] else "[bold red]")
                  + convergence_line(result.results.regime).replace("**", "") + "[/]")
    plots = render_report(path)
    console.print(f"\nStudy directory: [bold]{path}[/bold]\nSummary:         {result.summary}\n"
                  f"Plots:           {path / 'report'} ({len(plots)} PNGs)")
    if not args.no_tensorboard:
        print_command("TensorBoard:     ", [["tensorboard"], ["--logdir", path]])
    preset = STUDY_PRESETS[args.preset or "quick"]
    if preset.workflow_demo:
        console.print("\n" + demo_note(preset, result.config.episode.max_epochs), highlight=False)
    return EXIT_OK
