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
of policies that have since trained further, or of other runs, starts over). Other arguments are refused;
--overwrite starts the study over. Writes STUDY_DIR/{selection/round-N/, train/run-<r>/, replay-source/run-<r>/,
eval/, results.json, summary.md} and plots in report/; each phase's directory is a complete run directory (its own
events and TensorBoard logs), so each can be reported and resumed on its own.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    USER_ERRORS,
    WORKER_FIELDS,
    add_scale_options,
    add_shared_options,
    add_worker_options,
    console,
    data_record,
    float_in,
    int_in,
    one_of,
    preload_data,
    print_command,
    run_settings,
)
from esper.cli.compare import comparison_table
from esper.cli.family_study import __doc__ as family_doc
from esper.cli.family_study import cmd_family_study
from esper.cli.param_cost import resolve_auto_cost
from esper.cli.rundirs import discard_on_error
from esper.cli.study_phases import measured_setting, open_study, phase_runner, saved_run, train_run
from esper.cli.train_ppo import flag_overrides
from esper.data.families import FAMILIES
from esper.data.readers import SPLITS
from esper.data.tasks import DataCache, get_task_spec
from esper.env.charges import AUTO_COST
from esper.env.reward_setting import RewardSetting
from esper.env.rewards import RewardFamily
from esper.evaluation.phases import Phase
from esper.evaluation.runs import NO_COST, Cost, RunLabels, add_costs, episodes_cost, static_episode_cost
from esper.evaluation.selection import BEST_FIXED, chosen_blueprints, run_selection
from esper.evaluation.selection_record import (
    SELECTION_RECORD_FILE,
    RecordedSelection,
    read_selection_record,
    recorded_selection,
    write_selection_record,
)
from esper.evaluation.study import (
    STUDY_PRESETS,
    TUNED_HEURISTIC,
    StudyObjective,
    evaluation_plan,
    replay_seed_count,
    replay_source_phases,
    run_config,
    selection_plan,
    study_controllers,
    study_results,
    training_cost,
)
from esper.evaluation.study_report import SUMMARY_FILE, convergence_line, demo_note, mark_rerun, summary_markdown
from esper.evaluation.teacher_choice import TeacherChoice, choose_teacher, with_tuned
from esper.evaluation.tuning import RECORD_FILE as TUNED_RECORD_FILE
from esper.execution.devices import resolve_devices
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import SeedStream
from esper.report.render import render_report
from esper.simic.ppo.checkpoint import read_policy_checkpoint, resume_config, saved_config
from esper.simic.ppo.config import TrainingConfig, charge_fields
from esper.simic.ppo.teacher import NO_TEACHER
from esper.storage.rundir import (
    checkpoints_dir,
    default_run_dir,
    write_text_atomic,
)

MAX_STUDY_SEEDS = 10_000
MAX_RUNS = 100


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
    p.add_argument("--controller", action="append", default=[], metavar="SPEC",
                   help="an extra controller to compare (e.g. iql:PATH); repeatable")
    p.add_argument("--allow-setting-change", action="store_true",
                   help="let --controller policies run in another task, episode length or caps than they learned in")
    p.add_argument("--ppo", type=Path, nargs="+", metavar="RUN",
                   help="evaluate these PPO run directories (one training run each) instead of training")
    p.add_argument("--selection-record", type=Path, metavar="FILE",
                   help="reuse the selection (best-fixed, best-rule, heuristic:tuned and the teacher's choice) that "
                        "a study of the same preset and selection seeds recorded in FILE, its cost still counted")
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


_PLACEMENT = tuple(f"execution.{name}" for name in ("device", "devices", *WORKER_FIELDS))
"""Overrides (by dotted key) that change where a study runs, not what it measures."""


DEFAULT_TEACHER = "heuristic"
"""The teacher of a study's policies where it chooses none (no selection seeds) or before it has chosen."""


def _requested_config(args: argparse.Namespace, blueprints: list[str] | None, teacher: str | None
                      ) -> TrainingConfig:
    """The preset's config with the overrides (and `blueprints` and `teacher`, once the study chose them), its charge
    measured (or, with --selection-record, the λ its teacher was chosen by)."""
    config = _preset_config(args, blueprints, teacher)
    return resolve_auto_cost(config.with_overrides(reward=_cost_from_record(args, config.reward)), args)


def _cost_from_record(args: argparse.Namespace, reward: RewardSetting) -> RewardSetting:
    """With --selection-record, a λ the reward asks to measure ('auto') is the λ the record's teacher was chosen by
    and `heuristic:tuned` tuned for: the study then optimizes the objective its references were chosen on."""
    if args.selection_record is None:
        return reward
    record = read_selection_record(args.selection_record)
    field = "compute_cost" if reward.charge == "compute" else "param_cost"
    if reward.charge != record.charge or getattr(reward, field) != AUTO_COST:
        return reward  # a charge or λ of its own: `recorded_selection` refuses it if it differs from the record's
    return reward.with_overrides(**{field: record.cost})


def _chooses_teacher(args: argparse.Namespace, selection_seeds: int) -> bool:
    """Whether the study chooses its policies' teacher on the selection seeds: by the `gap` reward's objective, so not
    for another reward, nor when --set teacher names one."""
    return (args.ppo is None and selection_seeds > 0 and "ppo.teacher" not in flag_overrides(args)
            and _preset_config(args, None).reward.reward_family == RewardFamily.GAP)


def _preset_config(args: argparse.Namespace, blueprints: list[str] | None, teacher: str | None = None
                   ) -> TrainingConfig:
    """The preset's config with the overrides (and `blueprints`, and `teacher` unless --set names one: the learned
    arm of a study is a residual policy on a teacher, `--set teacher=none` a policy learned from scratch), its charge
    as given."""
    overrides = flag_overrides(args)
    overrides.setdefault("ppo.teacher", teacher or DEFAULT_TEACHER)
    across = sorted({"family", "reward.type_param_costs"} & set(overrides))
    if across:
        raise UserInputError(f"--set {across[0]}=... trains a policy across a task family: run `esper study --family "
                             f"NAME` instead, which trains it on the family's training types and measures it on the "
                             f"held-out ones")
    if args.blueprints_from_selection and "ppo.blueprints" in overrides:
        raise UserInputError("--blueprints-from-selection takes the policy's blueprints from best-fixed: drop "
                             "--set blueprints=... or the flag")
    if blueprints is not None:
        overrides["ppo.blueprints"] = blueprints
    base = TrainingConfig.preset(STUDY_PRESETS[args.preset].training)
    return base.with_overrides(**charge_fields(base.reward, overrides))


def study_dir(args: argparse.Namespace) -> Path:
    """--run-dir, else `<runs-root>/study_<task>_s<seed>_<digest>`, named like every command's directory by the task
    and base seed the study runs on (its --ppo runs' with --ppo): two studies on different tasks never look alike."""
    if args.run_dir is not None:
        return Path(args.run_dir)
    base = _saved_run(args, args.ppo[0]) if args.ppo is not None else _preset_config(args, None)
    settings = {k: v for k, v in run_settings(args).items() if k != "selection_only"}  # how far, not what
    return default_run_dir(args.runs_root, "study", base.episode.task, base.seed, settings)


def _saved_run(args: argparse.Namespace, train_dir: Path) -> TrainingConfig:
    """The config a --ppo run trained with; only where it runs may change."""
    latest = checkpoints_dir(train_dir) / "latest.pt"
    if not train_dir.is_dir():
        raise FileNotFoundError(f"--ppo {train_dir} is not a directory: pass PPO run directories (each holding "
                                f"checkpoints/init.pt and final.pt)")
    if not latest.exists():
        raise FileNotFoundError(f"{latest} not found: --ppo needs PPO run directories with checkpoints")
    overrides = flag_overrides(args)
    setting = sorted(k for k in overrides if k not in _PLACEMENT)
    if setting:
        raise UserInputError(f"--ppo evaluates the policies in the setting they trained in, so "
                             f"{', '.join(setting)} cannot be changed; to test one elsewhere run esper compare "
                             f"--controllers static heuristic ppo:{train_dir}/checkpoints/init.pt ppo:{train_dir} with "
                             f"the settings you want")
    return saved_config(read_policy_checkpoint(latest), latest).with_overrides(**overrides)


def _run_configs(args: argparse.Namespace, train_dirs: list[Path], blueprints: list[str] | None,
                 teacher: str | None = None, *, teacher_pending: bool = False
                 ) -> list[tuple[TrainingConfig, Path | None]]:
    """Each training run's config and the checkpoint it continues from (None: it starts now). Run r trains on the
    base config's setting with its own seed (`run_config`); --ppo runs bring their own configs, which must agree on
    everything but the seed. `teacher_pending`: the study chooses the teacher later, so a saved run keeps its own
    for now."""
    if args.ppo is not None:
        configs = [_saved_run(args, d) for d in train_dirs]
        first = {k: v for k, v in configs[0].dotted_dict().items() if k != "seed"}
        for d, c in zip(train_dirs[1:], configs[1:], strict=True):
            other = {k: v for k, v in c.dotted_dict().items() if k != "seed"}
            if other != first:
                differing = sorted(k for k in first if first[k] != other.get(k))
                raise UserInputError(f"--ppo {d} trained in another setting than {train_dirs[0]} "
                                     f"({', '.join(differing)}): a study compares runs of one setting")
        return [(c, checkpoints_dir(d) / "latest.pt") for c, d in zip(configs, train_dirs, strict=True)]
    base = _requested_config(args, blueprints, teacher)
    out: list[tuple[TrainingConfig, Path | None]] = []
    for r, d in enumerate(train_dirs):
        requested = run_config(base, r)
        saved = None if args.overwrite else saved_run(d)
        if saved is None:
            out.append((requested, None))
            continue
        if args.blueprints_from_selection and blueprints is None:  # before selection: check everything else
            requested = requested.with_overrides(**{"ppo.blueprints": saved[0].ppo.blueprints})
        if teacher_pending and teacher is None:  # before the teacher's choice, likewise
            requested = requested.with_overrides(**{"ppo.teacher": saved[0].ppo.teacher})
        out.append((resume_config(saved[0], requested), saved[1]))
    return out


def _teacher_label(teacher: str, choice: TeacherChoice | None) -> str | None:
    """How the evaluation names the policies' `teacher`: the chosen reference, or the spec --set named (None: none)."""
    if choice is not None:
        return choice.label
    return None if teacher == NO_TEACHER else teacher


def _settings(args: argparse.Namespace, seeds: int, selection_seeds: int, runs: int) -> dict[str, Any]:
    return {"preset": args.preset, "seeds": seeds, "selection_seeds": selection_seeds, "runs": runs,
            "controllers": args.controller, "ppo": None if args.ppo is None else [str(p) for p in args.ppo],
            "tie_threshold": args.tie_threshold, "max_test_samples": args.max_test_samples,
            "blueprints_from_selection": args.blueprints_from_selection, "plugins": args.plugin,
            **({} if args.selection_record is None else {"selection_record": str(args.selection_record)})}


def _check_selection_flags(args: argparse.Namespace, selection_seeds: int) -> None:
    if (args.selection_record is not None or args.selection_only) and (args.ppo is not None or selection_seeds == 0):
        flag = "--selection-record" if args.selection_record is not None else "--selection-only"
        raise UserInputError(f"{flag} is about the selection of a study that trains its policies: drop it, --ppo or "
                             f"--selection-seeds 0")
    if args.selection_record is not None and args.selection_only:
        raise UserInputError("--selection-only runs the selection that --selection-record reuses: drop one of them")


@dataclass(frozen=True)
class _References:
    """What the selection chose (label → spec), the teacher's choice (None: --set teacher named one, or no
    selection), and what the selection cost (None: none ran)."""

    chosen: dict[str, str]
    choice: TeacherChoice | None
    selection_cost: Cost | None


def _references(args: argparse.Namespace, path: Path, config: TrainingConfig, before: TrainingConfig,
                settings: dict[str, Any], cache: DataCache, selection_seeds: int, chooses: bool,
                reused: RecordedSelection | None) -> _References:
    """Best-fixed, best-rule and the teacher: from the record, or chosen on the selection seeds (then recorded in
    STUDY_DIR/selection-record.json, for later studies of the same preset and seeds)."""
    if reused is not None:
        choice = reused.teacher_choice(path / "teacher" / TUNED_RECORD_FILE) if chooses else None
        console.print(f"Selection: reused from {reused.path} ({reused.record.command}; esper "
                      f"{reused.record.esper_commit[:12]})", soft_wrap=True, highlight=False, markup=False)
        refs = _References(reused.chosen, choice, reused.selection_cost)
    elif selection_seeds == 0:
        return _References({}, None, None)
    else:
        plan, run_phase = selection_plan(config, args.max_test_samples), phase_runner(args, before, settings, cache)
        selection = run_selection(plan, path / "selection", selection_seeds, run_phase)
        choice = None if not chooses else choose_teacher(
            plan, path / "teacher", selection_seeds, selection, run_phase, StudyObjective(*before.charge_and_cost()),
            command="esper " + " ".join(args.argv))
        refs = _References(selection.chosen, choice,
                           episodes_cost(e for r in selection.rounds for e in r.episodes))
        assert refs.selection_cost is not None
        write_selection_record(path / SELECTION_RECORD_FILE, preset=args.preset, plan=plan, seeds=selection_seeds,
                               objective=before.charge_and_cost(), selection=selection,
                               selection_cost=refs.selection_cost, choice=choice,
                               command="esper " + " ".join(args.argv))
    if refs.choice is not None:
        console.print("Teacher: " + refs.choice.label + " (" + ", ".join(
            f"{k} {v:+.2f} pp" for k, v in refs.choice.scores.items()) + " on the selection seeds' objective)",
                      highlight=False)
    return refs


def cmd_study(args: argparse.Namespace) -> int:
    if args.family is not None:
        return cmd_family_study(args)
    if args.ignore_precheck:
        raise UserInputError("--ignore-precheck overrides the pre-check of a --family study: drop it or pass --family")
    args.preset = args.preset or "quick"
    preset = STUDY_PRESETS[args.preset]
    seeds = args.seeds or preset.seeds
    selection_seeds = preset.selection_seeds if args.selection_seeds is None else args.selection_seeds
    if args.ppo is not None and args.runs is not None and args.runs != len(args.ppo):
        raise UserInputError(f"--runs {args.runs} but {len(args.ppo)} --ppo run(s): each --ppo directory is one "
                             f"training run; drop --runs")
    runs = len(args.ppo) if args.ppo is not None else (args.runs or preset.runs)
    path = study_dir(args)
    settings = _settings(args, seeds, selection_seeds, runs)
    train_dirs = list(args.ppo) if args.ppo is not None else [path / "train" / f"run-{r}" for r in range(runs)]
    if args.blueprints_from_selection and (args.ppo is not None or selection_seeds == 0):
        raise UserInputError("--blueprints-from-selection trains the policy on best-fixed's blueprints, so it needs "
                             "selection seeds (not --selection-seeds 0) and a policy to train (not --ppo)")
    _check_selection_flags(args, selection_seeds)
    chooses = _chooses_teacher(args, selection_seeds)
    configs = _run_configs(args, train_dirs, None, teacher_pending=chooses)  # bad settings fail before any write
    config = configs[0][0]  # the base: selection and evaluation seeds come from its seed
    # Selection and the teacher's choice run before the policies' teacher is known: their phases record the default.
    before = config.with_overrides(**{"ppo.blueprints": None, **({"ppo.teacher": DEFAULT_TEACHER} if chooses else {})})
    reused = None if args.selection_record is None else recorded_selection(
        args.selection_record, read_selection_record(args.selection_record), preset=args.preset,
        plan=selection_plan(config, args.max_test_samples), seeds=selection_seeds, objective=before.charge_and_cost(),
        wants_teacher=chooses)
    execution = config.execution
    cache = preload_data(args, get_task_spec(config.episode.task), resolve_devices(execution.device, execution.devices),
                         SPLITS)
    study, fresh = open_study(path, args, settings, config.episode)
    mark_rerun(path, seeds, runs)
    watch = shlex.join(["tensorboard", "--logdir", str(path)])
    console.print(f"Study directory: {path} ({runs} training run(s); {watch})", soft_wrap=True, markup=False,
                  highlight=False)  # one line, to copy as is
    with discard_on_error(study, fresh=fresh, errors=USER_ERRORS):
        refs = _references(args, path, config, before, settings, cache, selection_seeds, chooses, reused)
        chosen, choice, selection_cost = refs.chosen, refs.choice, refs.selection_cost
        if args.selection_only:
            console.print(f"Selection recorded in {path / SELECTION_RECORD_FILE}. Continue the study with the same "
                          f"command without --selection-only, or reuse it in another study with --selection-record "
                          f"{path / SELECTION_RECORD_FILE}.", soft_wrap=True, highlight=False)
            return EXIT_OK
        blueprints = chosen_blueprints(chosen[BEST_FIXED]) if args.blueprints_from_selection else None
        if blueprints is not None or choice is not None:
            configs = _run_configs(args, train_dirs, blueprints, None if choice is None else choice.spec)
            config = configs[0][0]
        if args.ppo is None:
            for r, ((run_conf, checkpoint), train_dir) in enumerate(zip(configs, train_dirs, strict=True)):
                if not train_run(args, run_conf, checkpoint, train_dir, cache, r, preset.training):
                    console.print(f"Stopped during training run {r}. Continue with the same command "
                                  f"(--run-dir {path}).")
                    return EXIT_INTERRUPTED
        replay_dirs = [path / "replay-source" / f"run-{r}" for r in range(runs)]
        run_phase = phase_runner(args, config, settings, cache)
        sources = [run_phase(p) for p in replay_source_phases(
            path / "replay-source", evaluation_plan(config, SeedStream.SELECTION, args.max_test_samples), train_dirs,
            replay_seed_count(selection_seeds))]
        teacher = _teacher_label(config.ppo.teacher, choice)
        extra = [*([TUNED_HEURISTIC] if choice is not None and choice.tuned_path is not None else []),
                 *args.controller]
        if teacher is not None and teacher not in (*preset.baselines, *chosen, *extra):
            extra.append(teacher)
        specs, labels = study_controllers(preset.baselines, train_dirs, replay_dirs, chosen, extra)
        plan = with_tuned(evaluation_plan(config, max_test_samples=args.max_test_samples,
                                          allow_setting_change=args.allow_setting_change), choice)
        match = [RunLabels(r).final for r in range(runs)] if "static:matched" in preset.baselines else None
        comparison = run_phase(Phase("evaluation", path / "eval", plan, specs, labels, seeds, match))
    twin = static_episode_cost(comparison)
    results = study_results(
        comparison, runs, chosen=chosen, selection=selection_cost,
        training=[training_cost(c, d, twin) for (c, _), d in zip(configs, train_dirs, strict=True)],
        replay_sources=[episodes_cost(s.episodes) for s in sources], teacher=teacher,
        objective=(StudyObjective(*config.charge_and_cost()) if config.reward.reward_family == RewardFamily.GAP
                   else None),
        extra_costs=None if choice is None or choice.tuned_cost is None else {TUNED_HEURISTIC: choice.tuned_cost},
        teacher_cost=NO_COST if choice is None or selection_cost is None else add_costs(selection_cost, choice.cost))
    reward = plan.describe_reward()
    augmentation = data_record(plan.task, plan.episode.augment)["augmentation"]
    title = (f"esper study --preset {args.preset} ({config.episode.task}; augmentation {augmentation}; reward "
             f"{reward})")
    comparison.write(study, {"study": {"preset": args.preset, "seeds": seeds, "selection_seeds": selection_seeds,
                                       "reward": reward, "augmentation": augmentation,
                                       "training": measured_setting(config), "chosen": chosen,
                                       "teacher_choice": None if choice is None else choice.to_dict(),
                                       "selection_record": None if reused is None else reused.provenance(),
                                       **results.to_dict()}})
    summary = path / SUMMARY_FILE
    write_text_atomic(summary, summary_markdown(comparison, results, title=title,
                                                command="esper " + " ".join(args.argv), chosen=chosen,
                                                policy_blueprints=config.ppo.blueprints,
                                                selection_record=None if reused is None else reused.provenance()))
    console.print(comparison_table(comparison))
    console.print(("[bold]" if results.regime["convergence"]["converged"] else "[bold red]")
                  + convergence_line(results.regime).replace("**", "") + "[/]")
    plots = render_report(path)
    console.print(f"\nStudy directory: [bold]{path}[/bold]\nSummary:         {summary}\n"
                  f"Plots:           {path / 'report'} ({len(plots)} PNGs)")
    if not args.no_tensorboard:
        print_command("TensorBoard:     ", [["tensorboard"], ["--logdir", path]])
    if preset.workflow_demo:
        console.print("\n" + demo_note(preset, config.episode.max_epochs), highlight=False)
    return EXIT_OK

